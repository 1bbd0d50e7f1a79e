//! Which stored signals this process has brought into its mailbox: see [`Seen`].

/// Two paths bring a stored signal into the mailbox: the send that stored it (in this
/// process), and a refresh from the store (signals other processes stored). Both run under
/// the lock that guards this: a refresh skips the signals this process sent, and a send
/// skips a signal a refresh already brought in. Otherwise a signal taken by a waiter between
/// the two would be queued again, stale.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    /// Every stored signal up to this sequence number has been loaded or skipped.
    pub(super) up_to: u64,
    /// Signals above `up_to` this process sent and queued itself.
    pub(super) sent_here: std::collections::BTreeSet<u64>,
    /// How a refresh delivered the signals it brought in lately, for a send of this process
    /// whose own signal a refresh brought in first (the store told of it before the send
    /// returned): the send says how it was delivered. At most [`MAX_DELIVERED`].
    pub(super) delivered: std::collections::BTreeMap<u64, super::Delivery>,
}

impl Seen {
    /// Whether signals stored before `seq` (above `up_to`) may have come from another
    /// process: not all of them were sent here.
    pub(super) fn stored_elsewhere_before(&self, seq: u64) -> bool {
        let between = seq.saturating_sub(self.up_to.saturating_add(1));
        let ours = self
            .sent_here
            .range(self.up_to.saturating_add(1)..seq)
            .count();
        between > u64::try_from(ours).unwrap_or(u64::MAX)
    }

    /// Notes how a refresh delivered the stored signal `seq`.
    pub(super) fn note_delivered(&mut self, seq: u64, delivery: super::Delivery) {
        self.delivered.insert(seq, delivery);
        if self.delivered.len() > MAX_DELIVERED {
            self.delivered.pop_first();
        }
    }
}

/// How many deliveries of refreshed signals are remembered.
const MAX_DELIVERED: usize = 1_024;

/// How many signals sent here are remembered while no refresh runs.
pub(super) const MAX_SENT_HERE: usize = 100_000;
