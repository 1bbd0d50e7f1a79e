//! [`Transcript`]: a conversation whose copies share their messages.

use std::ops::Index;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::Message;

mod iter;

pub use iter::Iter;

/// A conversation: its messages in order.
///
/// A copy shares the messages rather than copying them: cloning a transcript of `n`
/// messages costs `n` reference counts, not `n` strings and JSON trees. An agent's state
/// and every model request carry one, and the graph copies the state at every step, so a
/// turn costs what it adds rather than what the conversation holds. Changing a message
/// ([`last_mut`](Self::last_mut), [`get_mut`](Self::get_mut)) copies that message alone
/// when another transcript still shares it.
///
/// It reads like a `Vec<Message>` (`iter`, `len`, `last`, indexing, `for m in &t`),
/// serializes as the same JSON array, and converts from and to one.
///
/// # Examples
///
/// ```
/// use loomflow::model::{Message, Transcript};
///
/// let mut asked = Transcript::from(vec![Message::user("Hello")]);
/// let before = asked.clone(); // shares the message
/// asked.push(Message::assistant("Hi!"));
/// assert_eq!(before.len(), 1);
/// assert_eq!(asked.len(), 2);
/// assert_eq!(asked[1], Message::assistant("Hi!"));
/// assert_eq!(serde_json::to_value(&asked)?, serde_json::to_value(asked.to_vec())?);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Default)]
pub struct Transcript {
    /// Sealed runs of messages, oldest first; shared, never changed in place.
    chunks: Vec<Arc<[Arc<Message>]>>,
    /// The newest messages, fewer than [`CHUNK`], sealed once there are that many.
    open: Vec<Arc<Message>>,
    /// Messages in `chunks`.
    sealed: usize,
}

impl Clone for Transcript {
    /// Shares the messages. The copy has room for one more open message: the executor runs
    /// each step on a copy of the state, and a step adds a message, which would otherwise
    /// grow the copy's list at once.
    fn clone(&self) -> Self {
        let mut open = Vec::with_capacity(self.open.len() + 1);
        open.extend(self.open.iter().cloned());
        Self {
            chunks: self.chunks.clone(),
            open,
            sealed: self.sealed,
        }
    }
}

/// How many messages a sealed chunk holds (one made by joining transcripts may hold fewer).
/// A copy costs a reference count per chunk and per open message: about `n / CHUNK +
/// CHUNK` rather than `n`.
const CHUNK: usize = 32;

impl Transcript {
    /// An empty conversation.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many messages it holds.
    pub fn len(&self) -> usize {
        self.sealed + self.open.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The messages in order.
    pub fn iter(&self) -> Iter<'_> {
        Iter::new(&self.chunks, &self.open, self.len())
    }

    /// The message at `index`, if there is one.
    pub fn get(&self, index: usize) -> Option<&Message> {
        self.shared(index).map(|m| &**m)
    }

    /// The first message.
    pub fn first(&self) -> Option<&Message> {
        self.get(0)
    }

    /// The last message.
    pub fn last(&self) -> Option<&Message> {
        match self.open.last() {
            Some(message) => Some(message),
            None => self.chunks.last().and_then(|c| c.last()).map(|m| &**m),
        }
    }

    /// The last message, shared: it stays readable while the transcript changes.
    pub(crate) fn last_shared(&self) -> Option<Arc<Message>> {
        let last = self.len().checked_sub(1)?;
        self.shared(last).cloned()
    }

    /// The message at `index`, to change; copied first if another transcript shares it.
    pub fn get_mut(&mut self, index: usize) -> Option<&mut Message> {
        if index >= self.len() {
            return None;
        }
        if index < self.sealed {
            // Rare (a rewrite of an old message): the sealed part is opened up.
            self.reopen();
        }
        let at = index - self.sealed;
        self.open.get_mut(at).map(Arc::make_mut)
    }

    /// Every message, to change; each is copied first if another transcript shares it.
    /// Where one message changes, [`get_mut`](Self::get_mut) copies only that one.
    pub fn iter_mut(&mut self) -> impl DoubleEndedIterator<Item = &mut Message> {
        if !self.chunks.is_empty() {
            self.reopen();
        }
        self.open.iter_mut().map(Arc::make_mut)
    }

    /// Whether it holds a message equal to `message`.
    pub fn contains(&self, message: &Message) -> bool {
        self.iter().any(|m| m == message)
    }

    /// The last message, to change; copied first if another transcript shares it.
    pub fn last_mut(&mut self) -> Option<&mut Message> {
        self.len()
            .checked_sub(1)
            .and_then(|last| self.get_mut(last))
    }

    /// Adds a message at the end.
    pub fn push(&mut self, message: Message) {
        self.push_shared(Arc::new(message));
    }

    /// Adds a message another transcript (or a request) may share.
    pub(crate) fn push_shared(&mut self, message: Arc<Message>) {
        self.open.push(message);
        if self.open.len() >= CHUNK {
            let sealed: Arc<[Arc<Message>]> = std::mem::take(&mut self.open).into();
            self.sealed += sealed.len();
            self.chunks.push(sealed);
        }
    }

    /// Adds `other`'s messages at the end, sharing them: its sealed chunks are shared
    /// whole.
    pub fn append_shared(&mut self, other: &Transcript) {
        if !self.open.is_empty() && !other.chunks.is_empty() {
            let sealed: Arc<[Arc<Message>]> = std::mem::take(&mut self.open).into();
            self.sealed += sealed.len();
            self.chunks.push(sealed);
        }
        if self.open.is_empty() {
            self.chunks.extend(other.chunks.iter().cloned());
            self.sealed += other.sealed;
        }
        for message in &other.open {
            self.push_shared(Arc::clone(message));
        }
    }

    /// Puts a message at `index`, shifting those after it.
    ///
    /// # Panics
    ///
    /// When `index > len`, as `Vec::insert` does.
    pub fn insert(&mut self, index: usize, message: Message) {
        let len = self.len();
        assert!(
            index <= len,
            "insertion index (is {index}) should be <= len (is {len})"
        );
        self.rebuild(|all| all.insert(index, Arc::new(message)));
    }

    /// Takes the message at `index` out.
    ///
    /// # Panics
    ///
    /// When `index >= len`, as `Vec::remove` does.
    pub fn remove(&mut self, index: usize) -> Message {
        let len = self.len();
        assert!(
            index < len,
            "removal index (is {index}) should be < len (is {len})"
        );
        let mut all = std::mem::take(self).into_shared();
        let removed = all.remove(index);
        for message in all {
            self.push_shared(message);
        }
        unshare(removed)
    }

    /// Takes the last message out.
    pub fn pop(&mut self) -> Option<Message> {
        if self.open.is_empty() && !self.chunks.is_empty() {
            self.reopen();
        }
        self.open.pop().map(unshare)
    }

    /// Keeps the first `len` messages.
    pub fn truncate(&mut self, len: usize) {
        if len < self.len() {
            self.rebuild(|all| all.truncate(len));
        }
    }

    /// Drops every message.
    pub fn clear(&mut self) {
        *self = Self::new();
    }

    /// Keeps the messages `keep` says yes to.
    pub fn retain(&mut self, mut keep: impl FnMut(&Message) -> bool) {
        self.rebuild(|all| all.retain(|m| keep(m)));
    }

    /// The messages from `start` on, sharing them.
    pub fn tail(&self, start: usize) -> Transcript {
        let mut tail = Transcript::new();
        let mut skipped = 0;
        for chunk in &self.chunks {
            if skipped >= start {
                tail.append_chunk(Arc::clone(chunk));
            } else if skipped + chunk.len() > start {
                for message in &chunk[start - skipped..] {
                    tail.push_shared(Arc::clone(message));
                }
            }
            skipped += chunk.len();
        }
        for message in self.open.iter().skip(start.saturating_sub(skipped)) {
            tail.push_shared(Arc::clone(message));
        }
        tail
    }

    fn append_chunk(&mut self, chunk: Arc<[Arc<Message>]>) {
        if !self.open.is_empty() {
            let sealed: Arc<[Arc<Message>]> = std::mem::take(&mut self.open).into();
            self.sealed += sealed.len();
            self.chunks.push(sealed);
        }
        self.sealed += chunk.len();
        self.chunks.push(chunk);
    }

    /// A copy of the messages.
    pub fn to_vec(&self) -> Vec<Message> {
        self.iter().cloned().collect()
    }

    /// The messages, copying only those another transcript shares.
    pub fn into_vec(self) -> Vec<Message> {
        self.into_shared().into_iter().map(unshare).collect()
    }

    fn shared(&self, index: usize) -> Option<&Arc<Message>> {
        if index >= self.sealed {
            return self.open.get(index - self.sealed);
        }
        let mut skipped = 0;
        for chunk in &self.chunks {
            if index < skipped + chunk.len() {
                return chunk.get(index - skipped);
            }
            skipped += chunk.len();
        }
        None
    }

    fn into_shared(self) -> Vec<Arc<Message>> {
        let mut all = Vec::with_capacity(self.len());
        for chunk in &self.chunks {
            all.extend(chunk.iter().cloned());
        }
        all.extend(self.open);
        all
    }

    /// Every message in the open part, to change any of them.
    fn reopen(&mut self) {
        self.open = std::mem::take(self).into_shared();
    }

    /// Changes the messages as a `Vec`, then seals them again.
    fn rebuild(&mut self, change: impl FnOnce(&mut Vec<Arc<Message>>)) {
        let mut all = std::mem::take(self).into_shared();
        change(&mut all);
        for message in all {
            self.push_shared(message);
        }
    }
}

/// The message, copied only if something else still holds it.
fn unshare(message: Arc<Message>) -> Message {
    Arc::try_unwrap(message).unwrap_or_else(|shared| (*shared).clone())
}

impl std::fmt::Debug for Transcript {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl PartialEq for Transcript {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().zip(other).all(|(a, b)| a == b)
    }
}

impl Index<usize> for Transcript {
    type Output = Message;

    /// # Panics
    ///
    /// When `index >= len`, as indexing a `Vec` does.
    #[allow(clippy::panic)] // `Index` has no other way to refuse
    fn index(&self, index: usize) -> &Message {
        match self.get(index) {
            Some(message) => message,
            None => panic!(
                "index {index} is out of a transcript of {} messages",
                self.len()
            ),
        }
    }
}

impl From<Vec<Message>> for Transcript {
    fn from(messages: Vec<Message>) -> Self {
        messages.into_iter().collect()
    }
}

impl<const N: usize> From<[Message; N]> for Transcript {
    fn from(messages: [Message; N]) -> Self {
        messages.into_iter().collect()
    }
}

impl From<Transcript> for Vec<Message> {
    fn from(transcript: Transcript) -> Self {
        transcript.into_vec()
    }
}

impl FromIterator<Message> for Transcript {
    fn from_iter<I: IntoIterator<Item = Message>>(messages: I) -> Self {
        let mut transcript = Self::new();
        transcript.extend(messages);
        transcript
    }
}

impl Extend<Message> for Transcript {
    fn extend<I: IntoIterator<Item = Message>>(&mut self, messages: I) {
        for message in messages {
            self.push(message);
        }
    }
}

impl<'a> Extend<&'a Message> for Transcript {
    fn extend<I: IntoIterator<Item = &'a Message>>(&mut self, messages: I) {
        self.extend(messages.into_iter().cloned());
    }
}

impl From<&[Message]> for Transcript {
    fn from(messages: &[Message]) -> Self {
        messages.iter().cloned().collect()
    }
}

impl<'a> IntoIterator for &'a Transcript {
    type Item = &'a Message;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl IntoIterator for Transcript {
    type Item = Message;
    type IntoIter = std::vec::IntoIter<Message>;

    fn into_iter(self) -> Self::IntoIter {
        self.into_vec().into_iter()
    }
}

impl PartialEq<Vec<Message>> for Transcript {
    fn eq(&self, other: &Vec<Message>) -> bool {
        self.len() == other.len() && self.iter().zip(other).all(|(a, b)| a == b)
    }
}

impl PartialEq<[Message]> for Transcript {
    fn eq(&self, other: &[Message]) -> bool {
        self.len() == other.len() && self.iter().zip(other).all(|(a, b)| a == b)
    }
}

impl<const N: usize> PartialEq<[Message; N]> for Transcript {
    fn eq(&self, other: &[Message; N]) -> bool {
        *self == other[..]
    }
}

impl Serialize for Transcript {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for Transcript {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::<Message>::deserialize(deserializer).map(Self::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_shares_until_a_message_changes() {
        let mut a = Transcript::from(vec![Message::user("one"), Message::assistant("two")]);
        let b = a.clone();
        assert!(Arc::ptr_eq(a.shared(0).unwrap(), b.shared(0).unwrap()));
        if let Some(Message::Assistant { content, .. }) = a.last_mut() {
            content.push('!');
        }
        assert_eq!(b[1], Message::assistant("two"), "the copy is unchanged");
        assert_eq!(a[1], Message::assistant("two!"));
        assert!(
            Arc::ptr_eq(a.shared(0).unwrap(), b.shared(0).unwrap()),
            "the unchanged message is still shared"
        );
    }

    fn numbered(n: usize) -> Vec<Message> {
        (0..n).map(|i| Message::user(i.to_string())).collect()
    }

    /// Every operation, on lengths around the chunk size, against the same on a `Vec`.
    #[test]
    fn it_behaves_as_a_vec_of_its_messages() {
        for n in [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 5] {
            let vec = numbered(n);
            let t = Transcript::from(vec.clone());
            assert_eq!(t.len(), n);
            assert_eq!(t, vec);
            assert_eq!(t.to_vec(), vec);
            assert!(t.iter().rev().eq(vec.iter().rev()), "{n} reversed");
            assert_eq!(t.first(), vec.first());
            assert_eq!(t.last(), vec.last());
            for i in 0..n {
                assert_eq!(t[i], vec[i]);
                assert_eq!(t.tail(i), vec[i..].to_vec(), "tail {i} of {n}");
            }
            assert_eq!(t.get(n), None);
            // Both ends at once meet in the middle without losing or repeating one.
            let mut iter = t.iter();
            let (mut front, mut back) = (Vec::new(), Vec::new());
            while let Some(m) = iter.next() {
                front.push(m.clone());
                if let Some(m) = iter.next_back() {
                    back.push(m.clone());
                }
            }
            back.reverse();
            front.extend(back);
            assert_eq!(front, vec, "{n} from both ends");

            let mut joined = Transcript::from(numbered(3));
            joined.append_shared(&t);
            let mut expected = numbered(3);
            expected.extend(vec.clone());
            assert_eq!(joined, expected);
            assert_eq!(joined.len(), n + 3);
            assert!(joined.iter().rev().eq(expected.iter().rev()));

            let mut changed = t.clone();
            let mut v = vec.clone();
            if n > 0 {
                *changed.get_mut(0).unwrap() = Message::user("changed");
                v[0] = Message::user("changed");
                assert_eq!(changed, v);
                assert_eq!(t, vec, "the original is untouched");
                assert_eq!(changed.remove(n / 2), v.remove(n / 2));
                changed.insert(n / 2, Message::assistant("put back"));
                v.insert(n / 2, Message::assistant("put back"));
                assert_eq!(changed.pop(), v.pop());
                changed.truncate(n / 3);
                v.truncate(n / 3);
                assert_eq!(changed, v);
            }
            let mut upper = t.clone();
            for m in upper.iter_mut() {
                *m = Message::user(m.text().to_uppercase() + "!");
            }
            let v: Vec<Message> = vec
                .iter()
                .map(|m| Message::user(m.text().to_uppercase() + "!"))
                .collect();
            assert_eq!(upper, v);
            assert_eq!(t, vec, "the original is untouched");
            if let Some(first) = vec.first() {
                assert!(t.contains(first));
            }
            assert!(!t.contains(&Message::assistant("never said")));
            let mut extended = Transcript::from(&vec[..]);
            extended.extend(&vec);
            assert_eq!(extended, [vec.clone(), vec.clone()].concat());
            let mut kept = t.clone();
            kept.retain(|m| m.text().ends_with('1'));
            let v: Vec<Message> = vec
                .iter()
                .filter(|m| m.text().ends_with('1'))
                .cloned()
                .collect();
            assert_eq!(kept, v);
            assert_eq!(t.clone().into_vec(), vec);
        }
    }

    #[test]
    fn it_reads_and_writes_the_json_of_a_vec() {
        let messages = vec![Message::user("one"), Message::assistant("two")];
        let transcript = Transcript::from(messages.clone());
        let json = serde_json::to_string(&transcript).unwrap_or_default();
        assert_eq!(json, serde_json::to_string(&messages).unwrap_or_default());
        let back: Transcript = serde_json::from_str(&json).unwrap_or_default();
        assert_eq!(back, messages);
        assert_eq!(back.into_vec(), messages);
    }
}
