//! The bookkeeping of one `publish` call, the same for every transport that pipelines a batch:
//! one outcome per envelope, and per-key order within the batch (a message that could not be
//! sent holds back the later ones with its key, so they never overtake it).

use std::collections::HashSet;
use std::future::IntoFuture;

use outbox_core::{Envelope, Outcome};
use tokio::time::Instant;

use crate::validate::quote;

/// The outcome of a message held back behind an earlier one with its `key` that was not sent:
/// unavailable, so it is published again, after that one.
pub(crate) fn held_back(key: &str) -> Outcome {
    Outcome::unavailable(format!(
        "not sent: an earlier message with key {} in this batch was not published",
        quote(key)
    ))
}

/// The outcomes of a batch as they become known.
#[derive(Debug)]
pub(crate) struct Outcomes<'a> {
    batch: &'a [Envelope],
    out: Vec<Option<Outcome>>,
    /// Keys of the messages not sent.
    held: HashSet<&'a str>,
}

impl<'a> Outcomes<'a> {
    pub(crate) fn new(batch: &'a [Envelope]) -> Self {
        Outcomes { batch, out: vec![None; batch.len()], held: HashSet::new() }
    }

    /// Whether envelope `i` must not be sent, because an earlier one with its key was not: then
    /// its outcome is [`held_back`].
    pub(crate) fn held_back(&mut self, i: usize) -> bool {
        match self.batch[i].key.as_deref().filter(|k| self.held.contains(k)) {
            Some(k) => {
                self.out[i] = Some(held_back(k));
                true
            }
            None => false,
        }
    }

    /// Envelope `i` was not sent (refused before the wire, or the send failed), for `o`: the
    /// later envelopes with its key are held back.
    pub(crate) fn not_sent(&mut self, i: usize, o: Outcome) {
        self.held.extend(self.batch[i].key.as_deref());
        self.out[i] = Some(o);
    }

    /// The outcome of envelope `i`.
    pub(crate) fn set(&mut self, i: usize, o: Outcome) {
        self.out[i] = Some(o);
    }

    /// Awaits the answers of the envelopes sent, `(index, context, answer)`, all together
    /// until `deadline`; `outcome` makes each answer (`None`: none by the deadline) the
    /// outcome of its envelope.
    pub(crate) async fn await_answers<C, F>(
        &mut self,
        sent: Vec<(usize, C, F)>,
        deadline: Instant,
        outcome: impl Fn(C, Option<F::Output>) -> Outcome,
    ) where
        F: IntoFuture,
    {
        for (i, o) in answers(sent, deadline, outcome).await {
            self.out[i] = Some(o);
        }
    }

    /// Every outcome, each reason bounded (a slot never filled is an internal error).
    pub(crate) fn finish(self) -> Vec<Outcome> {
        crate::validate::finish(self.out)
    }
}

/// The answers of the envelopes sent, `(index, context, answer)`, awaited all together until
/// `deadline`, each made a result by `result` (`None`: no answer by the deadline).
pub(crate) async fn answers<C, F, R>(
    sent: Vec<(usize, C, F)>,
    deadline: Instant,
    result: impl Fn(C, Option<F::Output>) -> R,
) -> Vec<(usize, R)>
where
    F: IntoFuture,
{
    let result = &result;
    futures::future::join_all(sent.into_iter().map(|(i, context, answer)| async move {
        let answer = tokio::time::timeout_at(deadline, answer.into_future()).await.ok();
        (i, result(context, answer))
    }))
    .await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use outbox_core::{FailureKind, MessageId};

    use futures::FutureExt;

    use super::*;
    use crate::common::testing::kind;

    fn envelope(id: i64, key: Option<&str>) -> Envelope {
        Envelope {
            id: MessageId(id),
            topic: "t".into(),
            key: key.map(Into::into),
            tag: None,
            payload: "{}".into(),
            headers: Default::default(),
            attempt: 1,
            created_at: "2024-05-01T10:00:00Z".parse().unwrap(),
        }
    }

    #[tokio::test]
    async fn a_message_not_sent_holds_back_its_key() {
        let batch =
            [envelope(1, Some("k")), envelope(2, Some("k")), envelope(3, Some("o")), envelope(4, None)];
        let mut out = Outcomes::new(&batch);
        assert!(!out.held_back(0));
        out.not_sent(0, Outcome::permanent("refused"));
        assert!(out.held_back(1));
        assert!(!out.held_back(2) && !out.held_back(3));
        let deadline = Instant::now() + Duration::from_millis(50);
        let sent = vec![
            (2, "o", futures::future::ready(true).boxed()),
            (3, "-", futures::future::pending::<bool>().boxed()),
        ];
        out.await_answers(sent, deadline, |_, answer| match answer {
            Some(true) => Outcome::Delivered,
            _ => Outcome::unavailable("no answer"),
        })
        .await;
        let out = out.finish();
        assert_eq!(kind(&out[0]), FailureKind::Permanent);
        assert_eq!(kind(&out[1]), FailureKind::Unavailable);
        assert!(format!("{:?}", out[1]).contains("earlier message with key \\\"k\\\""), "{:?}", out[1]);
        assert_eq!(out[2], Outcome::Delivered);
        assert_eq!(kind(&out[3]), FailureKind::Unavailable);
    }
}
