//! Reading a confined process's memory: the keeper's handlers read a
//! stopped call's arguments from the caller ([`super::supervise`] the
//! socket calls', [`super::attrs`] the attribute calls'). Its own module so
//! that both sit above it.

/// Reads `buf.len()` bytes at `addr` in process `pid`.
pub(super) fn read_memory(pid: i32, addr: u64, buf: &mut [u8]) -> Result<(), i32> {
    if buf.is_empty() {
        return Ok(());
    }
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: `local` covers `buf`, which is writable and borrowed for the
    // call; `remote` is only read by the kernel, in the other process.
    let got = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    if got == buf.len() as isize {
        Ok(())
    } else {
        Err(libc::EFAULT)
    }
}
