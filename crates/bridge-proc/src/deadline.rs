//! Deadlines from durations that come from outside (a variable, a caller's argument, a
//! provider's wait): `Instant + Duration` panics when the sum does not fit, so every such
//! deadline goes through [`after`] (or [`after_tokio`]), which holds it to [`FAR`] instead.

use std::time::{Duration, Instant};

/// The furthest deadline the bridge sets: 30 years, what "never" means for a timer (tokio's own
/// far future is the same).
pub const FAR: Duration = Duration::from_secs(30 * 365 * 24 * 3600);

/// `now + d`, or `now + FAR` when `d` is longer than that (never panics).
pub fn after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d.min(FAR)).unwrap_or(now)
}

/// [`after`] for tokio's clock.
pub fn after_tokio(d: Duration) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    now.checked_add(d.min(FAR)).unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_duration_gives_a_deadline() {
        let far = after(Duration::MAX);
        assert!(far > Instant::now() + Duration::from_secs(29 * 365 * 24 * 3600));
        let soon = after(Duration::from_secs(1));
        assert!(soon < Instant::now() + Duration::from_secs(2));
        assert!(after_tokio(Duration::MAX) > tokio::time::Instant::now());
    }
}
