//! [`Members`]: the queue memberships of one live message, kept inline for
//! the common case of a single queue (no heap allocation per message).

use crate::types::Member;

/// A small set of members, in insertion order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Members {
    /// Exactly one member.
    One(Member),
    /// Zero or several members.
    Many(Vec<Member>),
}

impl Default for Members {
    fn default() -> Self {
        Members::Many(Vec::new())
    }
}

impl Members {
    pub(crate) fn as_slice(&self) -> &[Member] {
        match self {
            Members::One(m) => std::slice::from_ref(m),
            Members::Many(v) => v,
        }
    }

    pub(crate) fn iter(&self) -> std::slice::Iter<'_, Member> {
        self.as_slice().iter()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.as_slice().is_empty()
    }

    pub(crate) fn contains(&self, m: &Member) -> bool {
        self.as_slice().contains(m)
    }

    pub(crate) fn push(&mut self, m: Member) {
        match self {
            Members::Many(v) if v.is_empty() => *self = Members::One(m),
            Members::Many(v) => v.push(m),
            Members::One(first) => *self = Members::Many(vec![*first, m]),
        }
    }

    /// Remove `m` (if present).
    pub(crate) fn remove(&mut self, m: &Member) {
        match self {
            Members::One(x) if x == m => *self = Members::Many(Vec::new()),
            Members::One(_) => {}
            Members::Many(v) => {
                v.retain(|x| x != m);
                if let [only] = v.as_slice() {
                    *self = Members::One(*only);
                }
            }
        }
    }

    pub(crate) fn into_vec(self) -> Vec<Member> {
        match self {
            Members::One(m) => vec![m],
            Members::Many(v) => v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_and_remove_keep_order_and_shape() {
        let mut m = Members::default();
        assert!(m.is_empty());
        m.push((1, 1));
        assert_eq!(m, Members::One((1, 1)));
        m.push((2, 1));
        m.push((3, 1));
        assert_eq!(m.as_slice(), &[(1, 1), (2, 1), (3, 1)]);
        m.remove(&(2, 1));
        m.remove(&(9, 9));
        assert_eq!(m.as_slice(), &[(1, 1), (3, 1)]);
        m.remove(&(1, 1));
        assert_eq!(m, Members::One((3, 1)));
        assert!(m.contains(&(3, 1)));
        m.remove(&(3, 1));
        assert!(m.is_empty());
        assert_eq!(m.into_vec(), Vec::<Member>::new());
    }
}
