//! mimalloc as the allocator, and its purge delay while index builders live.

use std::sync::atomic::{AtomicUsize, Ordering};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (the same index in its v2 and v3 headers) and default.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
const DEFAULT_PURGE_DELAY_MS: std::ffi::c_long = 10;
/// Index builders alive that keep freed memory for reuse (the default).
static ACTIVE_BUILDERS: AtomicUsize = AtomicUsize::new(0);
/// Index builders alive under a memory budget: freed memory goes back at once.
static LEAN_BUILDERS: AtomicUsize = AtomicUsize::new(0);

/// Set mimalloc's purge delay for the builders alive: keep freed memory while any builder
/// holds it (batch after batch reuses the same amount, and re-faulting (zeroing) returned
/// pages cost up to a quarter of the index's time); else purge at once while a builder under
/// a memory budget lives (a lower peak); else the default, giving the kept memory back. An
/// explicit MIMALLOC_PURGE_DELAY in the environment wins.
fn apply_purge_delay() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    let (held, lean) = (
        ACTIVE_BUILDERS.load(Ordering::SeqCst),
        LEAN_BUILDERS.load(Ordering::SeqCst),
    );
    let delay = if held > 0 {
        -1
    } else if lean > 0 {
        0
    } else {
        DEFAULT_PURGE_DELAY_MS
    };
    // SAFETY: setting an option is thread-safe and valid at any time; mi_collect only frees
    // memory mimalloc holds unused.
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, delay);
        if held == 0 {
            libmimalloc_sys::mi_collect(true);
        }
    }
}

/// A builder starts: `hold` keeps freed memory while it lives, else it is purged at once.
pub(crate) fn hold_memory(hold: bool) {
    let count = if hold {
        &ACTIVE_BUILDERS
    } else {
        &LEAN_BUILDERS
    };
    count.fetch_add(1, Ordering::SeqCst);
    apply_purge_delay();
}

/// A builder started with `hold_memory(hold)` is done.
pub(crate) fn release_memory(hold: bool) {
    let count = if hold {
        &ACTIVE_BUILDERS
    } else {
        &LEAN_BUILDERS
    };
    count.fetch_sub(1, Ordering::SeqCst);
    apply_purge_delay();
}
