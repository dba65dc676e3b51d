//! The open-files limit (RLIMIT_NOFILE): every connection is a file descriptor, and shells
//! often start programs with a soft limit of 1024 under a far higher hard limit. `--connections`
//! raises the soft limit to the hard one, as a server would, and says when even that is too
//! low for the connections asked.

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// Descriptors the tool needs besides its connections (runtime, stdio, the JSON file...).
pub const SPARE_DESCRIPTORS: u64 = 64;

/// The limit after an attempt to raise it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenFiles {
    /// The soft limit now in force; `None`: unlimited.
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

impl OpenFiles {
    /// Raises the soft limit to the hard one (when it is below) and returns both.
    pub fn raise() -> OpenFiles {
        let before = getrlimit(Resource::Nofile);
        if before.current != before.maximum {
            let raised = Rlimit {
                current: before.maximum,
                maximum: before.maximum,
            };
            // Refused only in odd sandboxes; the limit then stays as it was, which `check`
            // reports.
            let _ = setrlimit(Resource::Nofile, raised);
        }
        let now = getrlimit(Resource::Nofile);
        OpenFiles {
            soft: now.current,
            hard: now.maximum,
        }
    }

    /// A warning when `connections` will not fit under the limit, naming the fix.
    pub fn check(&self, connections: u32) -> Option<String> {
        let soft = self.soft?;
        let needed = u64::from(connections) + SPARE_DESCRIPTORS;
        if needed <= soft {
            return None;
        }
        let hard = self.hard.map_or("unlimited".to_owned(), |h| h.to_string());
        Some(format!(
            "the open-files limit is {soft} (hard limit {hard}), below the {needed} descriptors \
             that {connections} connections need: at most about {} can open. Raise the hard \
             limit where this runs (as root: ulimit -Hn {needed}; systemd: LimitNOFILE=; \
             docker: --ulimit nofile={needed}); the broker needs as many",
            soft.saturating_sub(SPARE_DESCRIPTORS)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_reaches_the_hard_one() {
        let limit = OpenFiles::raise();
        assert_eq!(limit.soft, limit.hard);
    }

    #[test]
    fn a_low_limit_is_named_with_its_fix() {
        let limit = OpenFiles {
            soft: Some(20_000),
            hard: Some(20_000),
        };
        assert_eq!(limit.check(19_000), None);
        let warning = limit.check(40_000).unwrap();
        assert!(
            warning.contains("at most about 19936 can open"),
            "{warning}"
        );
        assert!(warning.contains("ulimit -Hn 40064"), "{warning}");
        let unlimited = OpenFiles {
            soft: None,
            hard: None,
        };
        assert_eq!(unlimited.check(u32::MAX), None);
    }
}
