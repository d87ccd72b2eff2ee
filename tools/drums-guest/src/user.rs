//! The desktop user the guest acts as (drums::account) and, for the files the guest reads and writes as
//! that user, the user's file-system identity on one thread.

pub use drums::account::Account;

/// Run `f` on the current thread with the file-system identity of `acct` (setfsuid/setfsgid are per
/// thread, unlike setuid), so files the guest writes for the user are the user's and permissions are the
/// user's. Only ever called on a blocking-pool thread; the identity is restored before returning.
pub fn with_fs_identity<T>(acct: &Account, f: impl FnOnce() -> T) -> T {
    if !acct.is_other() {
        return f();
    }
    struct Restore(u32, u32);
    impl Drop for Restore {
        fn drop(&mut self) {
            // setfsuid back to 0 gives the thread its file capabilities back (capabilities(7)).
            unsafe {
                libc::setfsuid(self.0);
                libc::setfsgid(self.1);
            }
        }
    }
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let _restore = Restore(uid, gid);
    unsafe {
        libc::setfsgid(acct.gid);
        libc::setfsuid(acct.uid);
    }
    f()
}
