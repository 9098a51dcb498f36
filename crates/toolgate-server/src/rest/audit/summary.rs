//! `GET /v1/audit/summary`: the tenant's calls per minute, by outcome, with their
//! duration percentiles, for the console's charts.

use super::*;

/// Rows a summary reads at most (the newest): beyond, it says so and covers less time.
const SUMMARY_ROWS: i64 = 50_000;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct SummaryQuery {
    /// How far back, in minutes (1–1440, default 60).
    #[param(minimum = 1, maximum = 1440)]
    minutes: Option<i64>,
}

/// One minute of calls.
#[derive(Debug, Serialize, ToSchema)]
pub struct MinuteSummary {
    /// The minute's start.
    pub minute: DateTime<Utc>,
    /// Calls that finished `ok`.
    pub ok: u64,
    /// Calls that finished with an error (any category).
    pub errors: u64,
    /// Median duration, ms.
    pub p50_ms: f64,
    /// 99th percentile duration, ms.
    pub p99_ms: f64,
}

/// Calls per minute by outcome, with duration percentiles.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditSummary {
    /// Oldest first; minutes without calls are left out.
    pub minutes: Vec<MinuteSummary>,
    /// More calls than a summary reads (50,000) fell in the window: the oldest minutes
    /// are missing.
    pub truncated: bool,
}

/// The tenant's calls per minute by outcome, with p50 and p99 durations, from the audit
/// log (so every instance's calls), for charts (needs `audit:read`).
#[utoipa::path(
    get,
    path = "/v1/audit/summary",
    tag = "audit",
    params(SummaryQuery),
    responses(
        (status = 200, body = AuditSummary, description = "Minutes, oldest first"),
        (status = 400, body = Problem, content_type = "application/problem+json", description = "Bad window"),
        (status = 403, body = Problem, content_type = "application/problem+json", description = "Lacks audit:read"),
        crate::error::Refusals,
        crate::error::ReadRefusals,
    )
)]
pub(super) async fn audit_summary(
    State(app): State<AppState>,
    caller: Caller,
    AppQuery(q): AppQuery<SummaryQuery>,
) -> Result<AppJson<AuditSummary>, ApiError> {
    caller.require(scopes::AUDIT_READ)?;
    let minutes = bounded("minutes", q.minutes, 60, 1..=1440)?;
    let since = Utc::now() - chrono::Duration::minutes(minutes);
    let calls = app
        .store
        .audit_timings(caller.auth.tenant, since, SUMMARY_ROWS + 1)
        .await?;
    let truncated = calls.len() as i64 > SUMMARY_ROWS;
    Ok(AppJson(AuditSummary {
        minutes: summarize(calls.iter().take(SUMMARY_ROWS as usize)),
        truncated,
    }))
}

/// Groups rows by the minute they finished in: counts by outcome, duration percentiles.
fn summarize<'a>(rows: impl Iterator<Item = &'a CallTiming>) -> Vec<MinuteSummary> {
    use chrono::{DurationRound, TimeDelta};
    let mut by_minute: std::collections::BTreeMap<DateTime<Utc>, (u64, u64, Vec<f64>)> =
        Default::default();
    for row in rows {
        let minute = row
            .finished_at
            .duration_trunc(TimeDelta::minutes(1))
            .unwrap_or(row.finished_at);
        let entry = by_minute.entry(minute).or_default();
        if row.ok {
            entry.0 += 1;
        } else {
            entry.1 += 1;
        }
        entry.2.push(row.duration_us as f64 / 1000.0);
    }
    by_minute
        .into_iter()
        .map(|(minute, (ok, errors, mut durations))| {
            durations.sort_by(f64::total_cmp);
            // Nearest rank: the smallest value with at least p of the calls at or below it.
            let at = |p: f64| {
                let rank = (p * durations.len() as f64).ceil() as usize;
                durations[rank.clamp(1, durations.len()) - 1]
            };
            MinuteSummary {
                minute,
                ok,
                errors,
                p50_ms: at(0.50),
                p99_ms: at(0.99),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(finished: &str, outcome: &str, ms: i64) -> CallTiming {
        CallTiming {
            finished_at: finished.parse().expect("time"),
            ok: outcome == "ok",
            duration_us: ms * 1000,
        }
    }

    #[test]
    fn a_summary_counts_each_minute_by_outcome_with_nearest_rank_percentiles() {
        let mut rows: Vec<CallTiming> = (1..=100)
            .map(|ms| row("2026-11-26T00:01:30Z", "ok", ms))
            .collect();
        rows.push(row("2026-11-26T00:01:59Z", "timeout", 5000));
        rows.push(row("2026-11-26T00:00:10Z", "ok", 7));
        let minutes = summarize(rows.iter());
        assert_eq!(minutes.len(), 2);
        assert_eq!(minutes[0].minute.to_rfc3339(), "2026-11-26T00:00:00+00:00");
        assert_eq!((minutes[0].ok, minutes[0].errors), (1, 0));
        assert_eq!((minutes[0].p50_ms, minutes[0].p99_ms), (7.0, 7.0));
        assert_eq!((minutes[1].ok, minutes[1].errors), (100, 1));
        // 101 durations 1..=100 and 5000: rank 51 is 51, rank 100 is 100.
        assert_eq!((minutes[1].p50_ms, minutes[1].p99_ms), (51.0, 100.0));
    }
}
