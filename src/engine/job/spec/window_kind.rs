//! A window's kind in a job file: `tumbling`, `sliding` or `session`, checked (the window
//! stage's and the window join's).

use std::ops::Range;

use toml::Spanned;

use crate::engine::job::JobError;
use crate::engine::time::WindowKind;

use super::locator::Locator;
use super::raw::*;

/// `window.tumbling`, `window.sliding` or `window.session`: exactly one, with sizes above 0
/// and a slide of at most the size.
pub(super) fn check_window_kind(
    loc: &Locator<'_>,
    wspan: Range<usize>,
    tumbling: Option<Spanned<Duration>>,
    sliding: Option<Spanned<RawSliding>>,
    session: Option<Spanned<Duration>>,
) -> Result<WindowKind, JobError> {
    Ok(match (tumbling, sliding, session) {
        (None, None, Some(gap)) => {
            if gap.get_ref().0 <= 0 {
                return Err(loc.at(
                    &gap.span(),
                    Some("window.session"),
                    "the gap must be more than 0",
                ));
            }
            WindowKind::Session {
                gap: gap.get_ref().0,
            }
        }
        (Some(size), None, None) => {
            if size.get_ref().0 <= 0 {
                return Err(loc.at(
                    &size.span(),
                    Some("window.tumbling"),
                    "the size must be more than 0",
                ));
            }
            WindowKind::Tumbling {
                size: size.get_ref().0,
            }
        }
        (None, Some(s), None) => {
            let s = s.into_inner();
            let (size, slide) = (s.size.get_ref().0, s.slide.get_ref().0);
            if size <= 0 {
                return Err(loc.at(
                    &s.size.span(),
                    Some("window.sliding.size"),
                    "the size must be more than 0",
                ));
            }
            if slide <= 0 || slide > size {
                return Err(loc.at(
                    &s.slide.span(),
                    Some("window.sliding.slide"),
                    "the slide must be more than 0 and at most the size",
                ));
            }
            WindowKind::Sliding { size, slide }
        }
        _ => {
            return Err(loc.at(
                &wspan,
                Some("window"),
                "give exactly one of tumbling = \"1h\", sliding = { size = \"1h\", slide = \"5m\" } \
                 or session = \"30m\" (the gap)",
            ));
        }
    })
}
