/* The floor of any exit that is a process of its own: the least a program
 * that starts `bash -c true` and waits for it can cost, two process starts and
 * no work. `nd7-exec true` is such a program (it asks nd7 run to start the
 * shell), so bench/execstart.sh measures it against this as well as against
 * `bash -c true` (issue 32: at most 1.5x `bash -c true`). Built static there,
 * with the system's cc, so it pays no dynamic loader.
 * usage: two_starts */
#include <spawn.h>
#include <sys/wait.h>

extern char **environ;

int main(void) {
    char *argv[] = {"/bin/bash", "-c", "true", 0};
    pid_t pid;
    int status;
    if (posix_spawn(&pid, "/bin/bash", 0, 0, argv, environ) != 0) return 126;
    if (waitpid(pid, &status, 0) < 0) return 126;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}
