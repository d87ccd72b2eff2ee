//! Preloaded into Chromium in every Drums session. CRIU 4.2.1 does not restore memory protection keys:
//! after a restore every mapping has key 0, and each renderer forked from the restored zygote dies with
//! SIGTRAP because V8 expects its JIT region under the key it allocated. With `pkey_alloc` failing as on
//! a CPU without keys, Chromium never uses them, and restored sessions can open new renderers.
//! Trade-off: V8's key-based write protection of JIT code is off in every session (see drums-desktop(1)).

#[no_mangle]
pub extern "C" fn pkey_alloc(_flags: libc::c_uint, _access_rights: libc::c_uint) -> libc::c_int {
    unsafe { *libc::__errno_location() = libc::ENOSPC };
    -1
}
