//! The `rollboot` binary: parses the command line and hands over to [`cli`], which calls the
//! library crates (`rollboot`, and `rollboot_sim` with the default feature `simulate`).

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    #[cfg(not(target_os = "linux"))]
    allocator_options();
    let cli = match cli::parse() {
        Ok(c) => c,
        Err(code) => return code,
    };
    #[cfg(feature = "simulate")]
    if matches!(cli.command, cli::Command::Simulate(_)) {
        // A rehearsal runs the cluster, the controllers and every agent in one process: speed
        // over resident memory (see `allocator_options`).
        // SAFETY: sets a process-wide option of mimalloc; no pointer is involved.
        unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, SIMULATE_PURGE_DELAY_MS) };
    }
    match cli::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// mimalloc instead of the system's malloc: a third of a large rehearsal's time went to glibc's
/// malloc and free (perf; issue 14), and mimalloc more than halved it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's (v2) option numbers.
const ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
/// mimalloc's own `purge_delay`.
#[cfg(feature = "simulate")]
const SIMULATE_PURGE_DELAY_MS: std::ffi::c_long = 10;

/// Two of mimalloc's options, for the controller's and the agent's resident memory (issue 4:
/// a controller of 5,000 nodes under 100 MiB, an agent under 15 MiB):
/// - `arena_eager_commit` off. On Linux mimalloc commits each arena it reserves at once, and
///   where transparent huge pages are on, the pages it then touches come in 2 MiB: 5 to 8 MiB
///   more in an agent whose own heap is 3 MiB. It must be set before the first allocation
///   reserves the arena, which happens before `main` (the Rust runtime's start-up): on Linux
///   it is set from the binary's initializers (`.init_array`), which run before that.
/// - `purge_delay` 0: freed memory goes back to the system at once rather than after 10 ms. A
///   controller of 5,000 nodes peaked at 94.9 MiB with the delay and 86.3 MiB without, through
///   the first lists of its health gates' watches (scripts/measure-controller-memory.sh);
///   `simulate` puts the delay back, as giving memory back at once made its 5,000-node
///   rehearsal about 5% slower.
extern "C" fn allocator_options() {
    // SAFETY: sets process-wide options of mimalloc; no pointer is involved.
    unsafe {
        libmimalloc_sys::mi_option_set(ARENA_EAGER_COMMIT, 0);
        libmimalloc_sys::mi_option_set(PURGE_DELAY, 0);
    }
}

#[cfg(target_os = "linux")]
#[used]
#[link_section = ".init_array"]
static ALLOCATOR_OPTIONS: extern "C" fn() = allocator_options;
