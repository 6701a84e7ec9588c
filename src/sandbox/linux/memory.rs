//! Reading a confined process's memory: the keeper's handlers read a
//! stopped call's arguments from the caller ([`super::supervise`] the
//! socket calls', [`super::attrs`] the attribute calls'). Its own module so
//! that both sit above it.

/// Reads `buf.len()` bytes at `addr` in process `pid`.
pub(super) fn read_memory(pid: i32, addr: u64, buf: &mut [u8]) -> Result<(), i32> {
    if buf.is_empty() {
        return Ok(());
    }
    let len = buf.len();
    let remote = nix::sys::uio::RemoteIoVec {
        base: addr as usize,
        len,
    };
    match nix::sys::uio::process_vm_readv(
        nix::unistd::Pid::from_raw(pid),
        &mut [std::io::IoSliceMut::new(buf)],
        &[remote],
    ) {
        Ok(got) if got == len => Ok(()),
        _ => Err(libc::EFAULT),
    }
}
