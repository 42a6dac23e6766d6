//! A response body passed through frame by frame (chunked transfers and server-sent events
//! arrive as the replica sends them), holding the request's counts until it ends: the model's
//! in-flight count (the autoscaler's observation) and the replica's outstanding requests
//! (the balancer's) cover a streamed answer to its last byte.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::table::{Model, Replica};

/// The model's in-flight count, held from arrival to the response's end.
#[derive(Debug)]
pub(crate) struct InFlight(pub(crate) Arc<Model>);

impl InFlight {
    pub(crate) fn new(model: Arc<Model>) -> Self {
        model.in_flight.fetch_add(1, Ordering::Relaxed);
        model.arrived.fetch_add(1, Ordering::Relaxed);
        InFlight(model)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A replica's outstanding count, held from sending to the response's end.
#[derive(Debug)]
pub(crate) struct Outstanding(pub(crate) Arc<Replica>);

impl Outstanding {
    pub(crate) fn new(replica: Arc<Replica>) -> Self {
        replica.outstanding.fetch_add(1, Ordering::Relaxed);
        Outstanding(replica)
    }
}

impl Drop for Outstanding {
    fn drop(&mut self) {
        self.0.outstanding.fetch_sub(1, Ordering::Relaxed);
    }
}

pin_project! {
    /// The replica's body with the counts it holds.
    pub(crate) struct Tracked<B> {
        #[pin]
        inner: B,
        guards: Option<(InFlight, Outstanding)>,
    }
}

impl<B> Tracked<B> {
    pub(crate) fn new(inner: B, in_flight: InFlight, outstanding: Outstanding) -> Self {
        Tracked {
            inner,
            guards: Some((in_flight, outstanding)),
        }
    }
}

impl<B> Body for Tracked<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        let polled = this.inner.poll_frame(cx);
        if let Poll::Ready(None) | Poll::Ready(Some(Err(_))) = &polled {
            // Ended: the counts go now, not when the connection gets around to dropping it.
            this.guards.take();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
