//! The measured loops of the instruction drivers (`examples/instructions`,
//! `examples/instructions_smooth`): each driver is a binary of its own (what else a binary holds
//! changes what the compiler inlines), and both count the same two loops, included from here.
//! callgrind counts them with `--toggle-collect='*measured_loop*'`.

use std::hint::black_box;

use floodgate::Limiter;

/// `try_acquire`, using what a 429 needs: `remaining` of an admission, `retry_after` of a
/// denial (the same work and shape as `governor-state` in `examples/instructions_peers`).
#[inline(never)]
pub fn measured_loop<L: Limiter>(limiter: &L, calls: u64) -> u64 {
    (0..calls)
        .map(|_| match limiter.try_acquire(black_box(1)) {
            Ok(d) if d.is_allowed() => u64::from(black_box(d.remaining()) > 0),
            Ok(d) => {
                black_box(d.retry_after());
                0
            }
            Err(_) => 0,
        })
        .sum()
}

/// The count the `admit` loop passes: a literal `1`, as a caller writes `admit(1)` and as
/// governor's `check()` (no count) is one permit by construction; built with
/// `INSTRUCTIONS_OPAQUE_N` set in the environment, `black_box(1)`, a count the compiler cannot
/// see (the `admit-n` rows of `scripts/instructions`). A build-time switch, not a second loop: a
/// second call site of `admit` changes what the compiler inlines into both.
#[inline(always)]
fn count() -> u32 {
    if option_env!("INSTRUCTIONS_OPAQUE_N").is_some() {
        black_box(1)
    } else {
        1
    }
}

/// `admit`: only whether the permit was taken (the same work and shape as `governor`'s bool
/// `check().is_ok()`).
#[inline(never)]
pub fn measured_loop_admit<L: Limiter>(limiter: &L, calls: u64) -> u64 {
    (0..calls)
        .map(|_| u64::from(limiter.admit(count()).is_ok_and(|allowed| allowed)))
        .sum()
}
