//! The states a transaction coordinator reports for a transactional id.

use std::fmt;

/// A transactional id's state at its coordinator (DescribeTransactions, ListTransactions).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum TxnState {
    /// No transaction since the last one ended, or never one.
    Empty,
    /// A transaction is open.
    Ongoing,
    /// EndTxn(commit) arrived; markers are being written.
    PrepareCommit,
    /// EndTxn(abort) arrived (or the coordinator aborts it); markers are being written.
    PrepareAbort,
    /// The last transaction committed.
    CompleteCommit,
    /// The last transaction aborted.
    CompleteAbort,
    /// The coordinator is fencing the producer (a timeout abort or a new instance).
    PrepareEpochFence,
    /// The transactional id is expiring.
    Dead,
    /// A name this client does not know (a newer broker).
    Other(String),
}

impl TxnState {
    /// Every state this client knows, in the coordinator's spelling order.
    pub const KNOWN: [TxnState; 8] = [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::PrepareCommit,
        TxnState::PrepareAbort,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
        TxnState::PrepareEpochFence,
        TxnState::Dead,
    ];

    /// The state named as the coordinator spells it (`Ongoing`, `CompleteCommit`, …).
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::transactions::TxnState;
    /// assert_eq!(TxnState::parse("CompleteCommit"), TxnState::CompleteCommit);
    /// assert_eq!(TxnState::parse("Frozen"), TxnState::Other("Frozen".into()));
    /// ```
    pub fn parse(name: &str) -> TxnState {
        Self::KNOWN
            .iter()
            .find(|s| s.as_str() == name)
            .cloned()
            .unwrap_or_else(|| TxnState::Other(name.to_owned()))
    }

    /// The coordinator's spelling.
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::transactions::TxnState;
    /// assert_eq!(TxnState::PrepareCommit.as_str(), "PrepareCommit");
    /// ```
    pub fn as_str(&self) -> &str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
            TxnState::Dead => "Dead",
            TxnState::Other(s) => s,
        }
    }

    /// A transaction is open or still ending: it may hold a partition's last stable offset.
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::transactions::TxnState;
    /// assert!(TxnState::Ongoing.is_open() && TxnState::PrepareAbort.is_open());
    /// assert!(!TxnState::CompleteCommit.is_open());
    /// ```
    pub fn is_open(&self) -> bool {
        matches!(
            self,
            TxnState::Ongoing
                | TxnState::PrepareCommit
                | TxnState::PrepareAbort
                | TxnState::PrepareEpochFence
        )
    }

    /// Markers of a commit are written or being written.
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::transactions::TxnState;
    /// assert!(TxnState::PrepareCommit.is_commit() && TxnState::CompleteCommit.is_commit());
    /// assert!(!TxnState::Ongoing.is_commit());
    /// ```
    pub fn is_commit(&self) -> bool {
        matches!(self, TxnState::PrepareCommit | TxnState::CompleteCommit)
    }

    /// Markers of an abort are written or being written.
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::transactions::TxnState;
    /// assert!(TxnState::PrepareAbort.is_abort() && TxnState::CompleteAbort.is_abort());
    /// assert!(!TxnState::PrepareCommit.is_abort());
    /// ```
    pub fn is_abort(&self) -> bool {
        matches!(self, TxnState::PrepareAbort | TxnState::CompleteAbort)
    }

    /// The transaction has ended and its markers are written.
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::transactions::TxnState;
    /// assert!(TxnState::CompleteAbort.is_complete());
    /// assert!(!TxnState::PrepareCommit.is_complete()); // markers still being written
    /// ```
    pub fn is_complete(&self) -> bool {
        matches!(self, TxnState::CompleteCommit | TxnState::CompleteAbort)
    }
}

impl fmt::Display for TxnState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_classes() {
        // (state, open, commit, abort, complete)
        let table = [
            (TxnState::Empty, false, false, false, false),
            (TxnState::Ongoing, true, false, false, false),
            (TxnState::PrepareCommit, true, true, false, false),
            (TxnState::PrepareAbort, true, false, true, false),
            (TxnState::CompleteCommit, false, true, false, true),
            (TxnState::CompleteAbort, false, false, true, true),
            (TxnState::PrepareEpochFence, true, false, false, false),
            (TxnState::Dead, false, false, false, false),
            (TxnState::Other("New".into()), false, false, false, false),
        ];
        for (s, open, commit, abort, complete) in table {
            assert_eq!(TxnState::parse(s.as_str()), s);
            assert_eq!(
                (s.is_open(), s.is_commit(), s.is_abort(), s.is_complete()),
                (open, commit, abort, complete),
                "{s}"
            );
        }
    }
}
