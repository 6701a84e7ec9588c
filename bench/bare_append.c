/* The least a hook can cost: read standard input, append it to FILE as one
 * line (adding the newline if the input lacks one) with one write. `bench/hookpath.sh` measures `nd7 record` against it
 * (issue 30: at most 1.5x). Built there with the system's cc, as a user's
 * own hook would be.
 * usage: bare_append FILE < payload */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    if (!buf) return 1;
    for (;;) {
        if (len + 1 >= cap) {
            cap *= 2;
            char *grown = realloc(buf, cap);
            if (!grown) return 1;
            buf = grown;
        }
        ssize_t n = read(0, buf + len, cap - len - 1);
        if (n < 0) return 1;
        if (n == 0) break;
        len += (size_t)n;
    }
    if (len == 0 || buf[len - 1] != '\n') buf[len++] = '\n';
    int fd = open(argv[1], O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return 1;
    if (write(fd, buf, len) != (ssize_t)len) return 1;
    return close(fd) != 0;
}
