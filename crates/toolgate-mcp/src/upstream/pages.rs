//! Reading every page of an upstream's list, within bounds: rmcp's `list_all_*` follow
//! `nextCursor` for as long as the upstream names one, keeping every page.

use std::future::Future;

use rmcp::ServiceError;
use rmcp::model::{Cursor, ErrorData, PaginatedRequestParams};

/// The most entries one list of an upstream's (tools, resources, resource templates or
/// prompts) may hold.
pub(crate) const MAX_LISTED: usize = 10_000;
/// The most bytes, as JSON, one list may hold.
pub(crate) const MAX_LISTED_BYTES: usize = 16 << 20;
/// The most pages read for one list.
pub(crate) const MAX_PAGES: usize = 100;

/// Every page of a list, asked for with `page`, or an error once the list runs past
/// [`MAX_PAGES`] pages, [`MAX_LISTED`] entries or [`MAX_LISTED_BYTES`]. An upstream that
/// always names a next page was listed for ever before, its pages kept until the
/// gateway's memory ran out.
pub(crate) async fn all<T, F, Fut>(what: &str, mut page: F) -> Result<Vec<T>, ServiceError>
where
    T: serde::Serialize,
    F: FnMut(PaginatedRequestParams) -> Fut,
    Fut: Future<Output = Result<(Vec<T>, Option<Cursor>), ServiceError>>,
{
    let mut listed = Vec::new();
    let mut bytes = 0;
    let mut cursor = None;
    for _ in 0..MAX_PAGES {
        let (entries, next) = page(PaginatedRequestParams::default().with_cursor(cursor)).await?;
        for entry in entries {
            bytes += serde_json::to_vec(&entry).map_or(0, |json| json.len());
            listed.push(entry);
        }
        if listed.len() > MAX_LISTED {
            return Err(refused(format!("more than {MAX_LISTED} {what}")));
        }
        if bytes > MAX_LISTED_BYTES {
            return Err(refused(format!(
                "{what} of more than {} MiB",
                MAX_LISTED_BYTES >> 20
            )));
        }
        match next {
            Some(next) => cursor = Some(next),
            None => return Ok(listed),
        }
    }
    Err(refused(format!("{what} on more than {MAX_PAGES} pages")))
}

fn refused(what: String) -> ServiceError {
    ServiceError::McpError(ErrorData::internal_error(
        format!("the upstream listed {what}; toolgate lists at most that"),
        None,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages of `per_page` entries, naming a next page until `pages` have been given.
    async fn listing(per_page: usize, pages: usize) -> (Result<Vec<u32>, ServiceError>, usize) {
        let mut asked = 0;
        let listed = all("things", |params| {
            asked += 1;
            let n = params
                .cursor
                .map_or(0, |c| c.parse::<usize>().expect("our cursor"));
            let next = (n + 1 < pages).then(|| (n + 1).to_string());
            async move { Ok((vec![7; per_page], next)) }
        })
        .await;
        (listed, asked)
    }

    #[tokio::test]
    async fn every_page_is_read_up_to_the_bounds_and_never_past_them() {
        let (listed, asked) = listing(50, 3).await;
        assert_eq!((listed.expect("listed").len(), asked), (150, 3));

        let (listed, asked) = listing(0, usize::MAX).await;
        let err = listed.expect_err("a list without end");
        assert!(err.to_string().contains("more than 100 pages"), "{err}");
        assert_eq!(asked, MAX_PAGES, "no page asked for past the bound");

        let (listed, asked) = listing(1_000, usize::MAX).await;
        let err = listed.expect_err("too many");
        assert!(err.to_string().contains("more than 10000 things"), "{err}");
        assert_eq!(asked, 11);

        let big = "x".repeat(1 << 20);
        let listed = all("blobs", |_| {
            let big = big.clone();
            async move { Ok((vec![big], Some("again".to_owned()))) }
        })
        .await;
        let err = listed.expect_err("too large");
        assert!(
            err.to_string().contains("blobs of more than 16 MiB"),
            "{err}"
        );
    }
}
