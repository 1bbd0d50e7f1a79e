//! [`Iter`]: the messages of a transcript, in order, from either end.

use std::sync::Arc;

use super::Message;

/// The messages of a [`Transcript`](super::Transcript), in order.
#[derive(Debug, Clone)]
pub struct Iter<'a> {
    chunks: std::slice::Iter<'a, Arc<[Arc<Message>]>>,
    /// What is left of the chunk being read from the front.
    current: std::slice::Iter<'a, Arc<Message>>,
    open: std::slice::Iter<'a, Arc<Message>>,
    /// What is left of the chunk being read from the back, once the open part is done.
    back: std::slice::Iter<'a, Arc<Message>>,
    left: usize,
}

impl<'a> Iter<'a> {
    /// The messages of `chunks`, then of `open`: `len` in all.
    pub(super) fn new(
        chunks: &'a [Arc<[Arc<Message>]>],
        open: &'a [Arc<Message>],
        len: usize,
    ) -> Self {
        Self {
            chunks: chunks.iter(),
            current: [].iter(),
            open: open.iter(),
            back: [].iter(),
            left: len,
        }
    }
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a Message;

    fn next(&mut self) -> Option<&'a Message> {
        loop {
            if let Some(message) = self.current.next() {
                self.left -= 1;
                return Some(message);
            }
            match self.chunks.next() {
                Some(chunk) => self.current = chunk.iter(),
                None => break,
            }
        }
        // A chunk begun from the back comes before the open part.
        let message = self.back.next().or_else(|| self.open.next())?;
        self.left -= 1;
        Some(message)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(message) = self.open.next_back() {
                self.left -= 1;
                return Some(message);
            }
            if let Some(message) = self.back.next_back() {
                self.left -= 1;
                return Some(message);
            }
            match self.chunks.next_back() {
                Some(chunk) => self.back = chunk.iter(),
                None => break,
            }
        }
        let message = self.current.next_back()?;
        self.left -= 1;
        Some(message)
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl std::iter::FusedIterator for Iter<'_> {}
