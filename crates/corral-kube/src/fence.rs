//! Fencing: a replica writes only while it holds the lease by its own clock, and stops
//! before any other replica can think the lease free.
//!
//! The election ([`crate::leader::run_election`]) renews the Lease on its own thread and
//! records each success in the shared [`Leadership`]: writes are allowed until `held_until`
//! = the moment the successful renewal was *sent* + `renew_deadline`. Other replicas take
//! the lease over only after `renewTime + lease_duration`, and `renewTime` is written after
//! that moment, so with `renew_deadline < lease_duration` the holder's writes stop at least
//! `lease_duration - renew_deadline` before the lease can pass (client-go's renewDeadline).
//!
//! Every request but a read made with the pass's client goes through [`FenceLayer`], which
//! refuses it once the term it was made for is over: a pass stalled anywhere (a slow pass, a
//! SIGSTOP, a starved runtime) cannot write late. Leadership comes in numbered terms: a
//! renewal that lands after the deadline has passed starts a new term, so a pass of the
//! old term never writes again even if the same replica leads again.
//!
//! Left open, as in client-go: a request checked just before the process is frozen is sent
//! when it resumes. The window is the few microseconds between the check and the socket;
//! the operator's resourceVersion/UID preconditions and never-adopted pod names bound what
//! such a write can do.
//!
//! The rules are pure functions of explicit instants ([`Term::renewed`], [`Term::permits`]),
//! unit-tested below.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// Client-go's leader-election timings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timings {
    /// How long a Lease holds without renewal (what other replicas wait for).
    pub lease_duration: Duration,
    /// The holder stops writing this long after it sent its last successful renewal.
    pub renew_deadline: Duration,
    /// Between renewal attempts (and between a standby's attempts to acquire).
    pub retry_period: Duration,
}

impl Timings {
    /// Checks client-go's constraints: `retry_period < renew_deadline < lease_duration`.
    pub fn new(
        lease_duration: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
    ) -> Result<Self, String> {
        if retry_period.is_zero() {
            return Err("the lease retry period must be positive".into());
        }
        if renew_deadline <= retry_period {
            return Err(format!(
                "the renew deadline ({} s) must be longer than the retry period ({} s)",
                renew_deadline.as_secs_f64(),
                retry_period.as_secs_f64()
            ));
        }
        if lease_duration <= renew_deadline {
            return Err(format!(
                "the lease duration ({} s) must be longer than the renew deadline ({} s): the \
                 difference is the margin between this replica's last write and another \
                 replica taking the lease",
                lease_duration.as_secs_f64(),
                renew_deadline.as_secs_f64()
            ));
        }
        Ok(Timings {
            lease_duration,
            renew_deadline,
            retry_period,
        })
    }
}

/// This replica's leadership as the fence sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Term {
    /// Counts the terms; a pass is fenced to the term it started in.
    pub number: u64,
    /// Writes are allowed strictly before this instant; `None`: not leading.
    pub held_until: Option<Instant>,
}

impl Term {
    /// Whether the leadership is held at `now`.
    pub fn holds(&self, now: Instant) -> bool {
        self.held_until.is_some_and(|until| now < until)
    }

    /// Whether a write of term `term` may be sent at `now`.
    pub fn permits(&self, term: u64, now: Instant) -> bool {
        self.number == term && self.holds(now)
    }

    /// After a successful renewal sent at `sent_at` whose answer came at `now`. `fresh`: the
    /// lease was acquired (created, or taken over free or expired), not renewed. A renewal
    /// that finds the term lapsed (its deadline passed while the answer was awaited, or
    /// between attempts) starts a new term, as does an acquisition.
    pub fn renewed(&self, sent_at: Instant, now: Instant, fresh: bool, deadline: Duration) -> Term {
        let continues = !fresh && self.holds(now);
        let until = sent_at + deadline;
        Term {
            number: if continues {
                self.number
            } else {
                self.number + 1
            },
            // Never shorter than an earlier renewal granted (answers may come out of order).
            held_until: Some(match self.held_until {
                Some(before) if continues => before.max(until),
                _ => until,
            }),
        }
    }

    /// The lease is someone else's, or the replica stops: no term.
    pub fn ended(&self) -> Term {
        Term {
            number: self.number,
            held_until: None,
        }
    }
}

/// The shared leadership token: written by the election, read by the fence, the pass loop
/// and `corral_leader`.
pub struct Leadership {
    term: watch::Sender<Term>,
    /// Once closed (shutdown) no renewal grants a term again.
    closed: std::sync::atomic::AtomicBool,
}

impl Default for Leadership {
    fn default() -> Self {
        Leadership {
            term: watch::Sender::new(Term::default()),
            closed: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl Leadership {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn term(&self) -> Term {
        *self.term.borrow()
    }

    /// Whether this replica leads now (`corral_leader`).
    pub fn holds_now(&self) -> bool {
        self.term().holds(Instant::now())
    }

    /// Records a successful renewal (see [`Term::renewed`]); returns the term.
    pub fn renewed(&self, sent_at: Instant, fresh: bool, deadline: Duration) -> Term {
        if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            return self.term();
        }
        self.term
            .send_modify(|t| *t = t.renewed(sent_at, Instant::now(), fresh, deadline));
        self.term()
    }

    /// The lease is held by someone else (or was given up).
    pub fn end(&self) {
        self.term.send_modify(|t| *t = t.ended());
    }

    /// Shutdown: ends the term for good, before the lease is released.
    pub fn close(&self) {
        self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
        self.end();
    }

    /// Waits until a term is held and returns it.
    pub async fn acquired(&self) -> Term {
        let mut rx = self.term.subscribe();
        loop {
            let t = *rx.borrow_and_update();
            if t.holds(Instant::now()) {
                return t;
            }
            if rx.changed().await.is_err() {
                // The sender lives in self: unreachable, but never spin.
                std::future::pending::<()>().await;
            }
        }
    }

    /// Resolves when term `term` is over: its deadline passed without a renewal (checked
    /// by the clock, so even a stalled election cannot keep it alive), or it ended.
    pub async fn lost(&self, term: u64) {
        let mut rx = self.term.subscribe();
        loop {
            let t = *rx.borrow_and_update();
            let Some(until) = t.held_until.filter(|_| t.number == term) else {
                return;
            };
            if !t.permits(term, Instant::now()) {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep_until(tokio::time::Instant::from_std(until)) => {}
                changed = rx.changed() => if changed.is_err() { return },
            }
        }
    }

    /// The fence of term `term`.
    pub fn fence(self: &Arc<Self>, term: u64) -> Fence {
        Fence {
            leadership: self.clone(),
            term,
        }
    }
}

/// Writes of one term: allowed while that term holds.
#[derive(Clone)]
pub struct Fence {
    leadership: Arc<Leadership>,
    pub term: u64,
}

impl Fence {
    /// Whether a write may be sent now.
    pub fn permits_now(&self) -> bool {
        self.leadership.term().permits(self.term, Instant::now())
    }

    pub async fn lost(&self) {
        self.leadership.lost(self.term).await
    }
}

/// The error of a write refused by the fence.
#[derive(Debug, thiserror::Error)]
#[error("not leading (term {term} is over): write refused by the leader-election fence")]
pub struct Fenced {
    pub term: u64,
}

/// A tower layer for the pass's client: every request but a read is checked against the
/// fence the moment it is sent.
#[derive(Clone)]
pub struct FenceLayer(pub Fence);

impl<S> tower_layer::Layer<S> for FenceLayer {
    type Service = FenceService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        FenceService {
            inner,
            fence: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub struct FenceService<S> {
    inner: S,
    fence: Fence,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Reads (and watches) go through whoever leads: they change nothing.
fn is_write(method: &http::Method) -> bool {
    !matches!(
        *method,
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
    )
}

impl<S, B> tower_service::Service<http::Request<B>> for FenceService<S>
where
    S: tower_service::Service<http::Request<B>> + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    B: 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if is_write(req.method()) && !self.fence.permits_now() {
            let term = self.fence.term;
            tracing::warn!(
                method = %req.method(),
                path = %req.uri().path(),
                "write refused: not leading"
            );
            return Box::pin(std::future::ready(Err(
                Box::new(Fenced { term }) as BoxError
            )));
        }
        let fut = self.inner.call(req);
        Box::pin(async move { fut.await.map_err(Into::into) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEADLINE: Duration = Duration::from_secs(10);

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn timings_follow_client_go() {
        assert!(Timings::new(secs(15), secs(10), secs(2)).is_ok());
        assert!(Timings::new(secs(15), secs(15), secs(2)).is_err());
        assert!(Timings::new(secs(15), secs(2), secs(2)).is_err());
        assert!(Timings::new(secs(15), secs(10), Duration::ZERO).is_err());
    }

    #[test]
    fn the_deadline_counts_from_when_the_renewal_was_sent() {
        let t0 = Instant::now();
        let t = Term::default().renewed(t0, t0 + secs(3), true, DEADLINE);
        assert_eq!(t.number, 1);
        assert_eq!(t.held_until, Some(t0 + DEADLINE));
        assert!(t.permits(1, t0 + secs(9)));
        // Strictly before: at the deadline itself nothing is written.
        assert!(!t.permits(1, t0 + DEADLINE));
        assert!(!t.permits(1, t0 + secs(11)));
        // Another term's pass never writes.
        assert!(!t.permits(0, t0 + secs(1)));
    }

    #[test]
    fn renewals_in_time_extend_the_same_term() {
        let t0 = Instant::now();
        let t = Term::default().renewed(t0, t0, true, DEADLINE);
        let t = t.renewed(t0 + secs(2), t0 + secs(2), false, DEADLINE);
        assert_eq!(t.number, 1);
        assert_eq!(t.held_until, Some(t0 + secs(12)));
        // An answer to an older renewal arriving late never shortens the term.
        let late = t.renewed(t0 + secs(1), t0 + secs(3), false, DEADLINE);
        assert_eq!(late.held_until, Some(t0 + secs(12)));
        assert!(late.permits(1, t0 + secs(11)));
    }

    #[test]
    fn a_renewal_after_the_deadline_starts_a_new_term() {
        let t0 = Instant::now();
        let t = Term::default().renewed(t0, t0, true, DEADLINE);
        // Paused (or the API server unreachable) past the deadline, then renewed: the lease
        // was still ours, but the old term's passes stay fenced.
        let t2 = t.renewed(t0 + secs(12), t0 + secs(12), false, DEADLINE);
        assert_eq!(t2.number, 2);
        assert!(!t2.permits(1, t0 + secs(13)));
        assert!(t2.permits(2, t0 + secs(13)));
        // A renewal whose answer lands after the deadline: also a new term.
        let t3 = t.renewed(t0 + secs(9), t0 + secs(10), false, DEADLINE);
        assert_eq!(t3.number, 2);
    }

    #[test]
    fn an_acquisition_always_starts_a_new_term() {
        let t0 = Instant::now();
        let t = Term::default().renewed(t0, t0, true, DEADLINE);
        let t = t.renewed(t0 + secs(1), t0 + secs(1), true, DEADLINE);
        assert_eq!(t.number, 2);
    }

    #[test]
    fn an_ended_term_permits_nothing() {
        let t0 = Instant::now();
        let t = Term::default().renewed(t0, t0, true, DEADLINE).ended();
        assert!(!t.holds(t0));
        assert!(!t.permits(1, t0));
        assert_eq!(t.renewed(t0, t0, false, DEADLINE).number, 2);
    }

    #[test]
    fn the_holders_writes_stop_before_anyone_may_take_the_lease() {
        // The holder sends its renewal at `sent`; the renewTime it writes is taken after
        // that, and others wait lease_duration from renewTime.
        let timings = Timings::new(secs(15), secs(10), secs(2)).expect("valid");
        let sent = Instant::now();
        let renew_time = sent + Duration::from_millis(1);
        let others_take_over = renew_time + timings.lease_duration;
        let t = Term::default().renewed(sent, sent, true, timings.renew_deadline);
        let last_write = t.held_until.expect("held");
        assert!(last_write + secs(5) <= others_take_over);
    }

    #[tokio::test]
    async fn lost_resolves_at_the_deadline_without_the_election() {
        let l = Leadership::new();
        let t = l.renewed(Instant::now(), true, Duration::from_millis(50));
        assert!(l.holds_now());
        let fence = l.fence(t.number);
        assert!(fence.permits_now());
        tokio::time::timeout(Duration::from_secs(5), fence.lost())
            .await
            .expect("the term ends by itself at its deadline");
        assert!(!fence.permits_now());
        assert!(!l.holds_now());
    }

    #[tokio::test]
    async fn closed_leadership_is_never_granted_again() {
        let l = Leadership::new();
        l.renewed(Instant::now(), true, DEADLINE);
        l.close();
        assert!(!l.holds_now());
        l.renewed(Instant::now(), false, DEADLINE);
        assert!(!l.holds_now());
    }

    #[tokio::test]
    async fn the_layer_refuses_writes_but_not_reads_after_the_term() {
        use tower_service::Service;
        let l = Leadership::new();
        let t = l.renewed(Instant::now(), true, DEADLINE);
        let mut svc = tower_layer::Layer::layer(&FenceLayer(l.fence(t.number)), Echo);
        let post = || {
            http::Request::builder()
                .method("POST")
                .body(())
                .expect("request")
        };
        let get = || {
            http::Request::builder()
                .method("GET")
                .body(())
                .expect("request")
        };
        assert!(svc.call(post()).await.is_ok());
        l.end();
        let refused = svc.call(post()).await.expect_err("fenced");
        assert!(refused.downcast_ref::<Fenced>().is_some(), "{refused}");
        assert!(svc.call(get()).await.is_ok());
    }

    /// A service answering every request at once.
    #[derive(Clone)]
    struct Echo;
    impl tower_service::Service<http::Request<()>> for Echo {
        type Response = ();
        type Error = BoxError;
        type Future = std::future::Ready<Result<(), BoxError>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, _: http::Request<()>) -> Self::Future {
            std::future::ready(Ok(()))
        }
    }
}
