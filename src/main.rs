//! The `rollboot` binary: parses the command line and hands over to [`rollboot::cli`].

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    #[cfg(not(target_os = "linux"))]
    allocator_options();
    let cli = rollboot::cli::Cli::parse();
    match rollboot::cli::run(cli) {
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

/// mimalloc's `arena_eager_commit` (option 4 of its v2): off. On Linux it commits each arena it
/// reserves at once, and where transparent huge pages are on, the pages it then touches come
/// in 2 MiB: 5 to 8 MiB more resident memory in an agent whose own heap is 3 MiB (issue 4: an
/// agent under 15 MiB). It must be set before the first allocation reserves the arena, which
/// happens before `main` (the Rust runtime's start-up): on Linux it is set from the binary's
/// initializers (`.init_array`), which run before that.
extern "C" fn allocator_options() {
    const ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
    // SAFETY: sets a process-wide option of mimalloc; no pointer is involved.
    unsafe { libmimalloc_sys::mi_option_set(ARENA_EAGER_COMMIT, 0) };
}

#[cfg(target_os = "linux")]
#[used]
#[link_section = ".init_array"]
static ALLOCATOR_OPTIONS: extern "C" fn() = allocator_options;
