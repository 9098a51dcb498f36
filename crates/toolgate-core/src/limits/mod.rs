//! Admission: rate limits, concurrency limits and load shedding, the executor's first
//! step (never an adapter's).
//!
//! - **Rate limits** (GCRA token buckets, `governor`): calls per minute per tenant, per
//!   principal and per tool (across the tenant). A limit of `n` admits up to `n` calls at
//!   once, then one every `60/n` s. The operator sets defaults (`[limits]`); a tenant's
//!   policy may only tighten them. A call over a limit is refused `rate_limited` with the
//!   wait until the bucket admits it (REST: 429 + `Retry-After`).
//! - **Concurrency**: calls in flight at once per tenant; one more is `rate_limited`.
//! - **Shedding**: when the instance already runs its most calls at once, or the audit
//!   queue is nearly full, a call is refused `unavailable` (REST: 503 + `Retry-After`) at
//!   once, instead of queueing until it times out.
//!
//! A refused call was never accepted (its error's details say `"not_run": true`, with
//! `retry_after_secs`): it leaves no audit row and emits no call events, so
//! a flood costs the gateway (and the other tenants) almost nothing; each refusal is
//! counted in the metrics (`toolgate.admission.rejections`).
//!
//! **Several instances** share each limit: each instance admits `ceil(limit / n)` of it,
//! `n` being the live instances that share the store (see [`Admission::set_instances`]).
//! A tenant whose traffic is spread evenly gets its limit; one whose traffic lands on
//! fewer instances gets less (never more than the limit, never less than `limit / n`).

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};
use serde::{Deserialize, Serialize};

use crate::per_key::PerKey;
use crate::{AuthContext, ErrorKind, PrincipalId, TenantId, ToolError};

/// Limits on a tenant's calls. `None` (or a tool absent from `tools`) is no limit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RateLimits {
    /// Calls per minute by the whole tenant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant_per_minute: Option<u32>,
    /// Calls per minute by each principal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub principal_per_minute: Option<u32>,
    /// Calls per minute of a tool, by tool name, by the whole tenant.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, u32>,
    /// Calls in flight at once for the whole tenant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant_concurrency: Option<u32>,
}

impl RateLimits {
    /// Whether no limit is set.
    pub fn is_empty(&self) -> bool {
        *self == RateLimits::default()
    }

    /// Problems that make the limits unusable, each with the field it concerns.
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut problems = Vec::new();
        let mut zero = |field: String| problems.push((field, "must be at least 1".into()));
        for (field, value) in [
            ("tenant_per_minute", self.tenant_per_minute),
            ("principal_per_minute", self.principal_per_minute),
            ("tenant_concurrency", self.tenant_concurrency),
        ] {
            if value == Some(0) {
                zero(field.into());
            }
        }
        for (tool, value) in &self.tools {
            if *value == 0 {
                zero(format!("tools/{tool}"));
            }
        }
        problems
    }

    /// The stricter of `self` and `other`, limit by limit.
    pub fn tightest(&self, other: &RateLimits) -> RateLimits {
        fn min(a: Option<u32>, b: Option<u32>) -> Option<u32> {
            match (a, b) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        }
        let mut tools = self.tools.clone();
        for (tool, limit) in &other.tools {
            tools
                .entry(tool.clone())
                .and_modify(|mine| *mine = (*mine).min(*limit))
                .or_insert(*limit);
        }
        RateLimits {
            tenant_per_minute: min(self.tenant_per_minute, other.tenant_per_minute),
            principal_per_minute: min(self.principal_per_minute, other.principal_per_minute),
            tools,
            tenant_concurrency: min(self.tenant_concurrency, other.tenant_concurrency),
        }
    }
}

/// The operator's side of admission: defaults every tenant gets, and the instance's own
/// capacity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdmissionConfig {
    /// Limits for every tenant; a tenant's policy may only tighten them.
    pub defaults: RateLimits,
    /// Calls this instance runs at once, all tenants together; one more is shed.
    pub max_in_flight: usize,
    /// Records waiting in the audit queue at which new calls are shed.
    pub max_audit_backlog: usize,
    /// REST reads (`GET`) per minute by each principal; `None`: not limited. Reads are no
    /// tool calls (no executor, no audit row): this bounds what one key's reads take of
    /// the instance's cores, as the tenant's pool share bounds what they take of the
    /// database.
    pub principal_reads_per_minute: Option<u32>,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        Self {
            defaults: RateLimits::default(),
            max_in_flight: 4096,
            max_audit_backlog: 6144,
            principal_reads_per_minute: None,
        }
    }
}

/// Which bucket a call draws from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Bucket {
    Tenant(TenantId),
    Principal(TenantId, PrincipalId),
    /// A tool by its name's hash (no allocation per call; 64-bit collisions between two
    /// tool names of one tenant are not a practical concern).
    Tool(TenantId, u64),
    /// A principal's REST reads.
    Reads(TenantId, PrincipalId),
}

/// What a refusal was for, as counted in the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    Tenant,
    Principal,
    Tool,
    Concurrency,
    InFlight,
    AuditBacklog,
    /// An SSE stream, MCP session stream or long wait past its principal's or tenant's
    /// cap (outside the executor: the gateway's streams).
    Streams,
    /// An agent run's start past the tenant's runs on the instance.
    TenantRuns,
    /// A verification of a tenant's audit log while another runs on the instance.
    Verifications,
    /// A REST read past its principal's reads per minute (outside the executor: reads
    /// are no calls).
    Reads,
}

impl Limit {
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Tenant => "tenant",
            Limit::Principal => "principal",
            Limit::Tool => "tool",
            Limit::Concurrency => "tenant_concurrency",
            Limit::InFlight => "instance_in_flight",
            Limit::AuditBacklog => "audit_backlog",
            Limit::Streams => "streams",
            Limit::TenantRuns => "tenant_runs",
            Limit::Verifications => "verifications",
            Limit::Reads => "reads",
        }
    }
}

/// Whether `err` is a refusal at admission: the tool did not run, so the same call may be
/// made again after `retry_after_secs` even when it has side effects.
pub fn refused_before_running(err: &ToolError) -> Option<Duration> {
    err.retry.filter(|r| r.not_run).map(|r| r.after)
}

/// A refused call: the limit it hit and the error its caller gets.
#[derive(Debug)]
pub struct Refusal {
    pub limit: Limit,
    pub error: ToolError,
}

/// Admission state for one instance. Cheap to share (`Arc`).
pub struct Admission {
    config: AdmissionConfig,
    instances: AtomicU32,
    clock: DefaultClock,
    /// One keyed limiter per rate (calls per minute, after the instance share): a rate is
    /// shared by every bucket with that limit, and there are few distinct limits.
    limiters: RwLock<HashMap<NonZeroU32, Arc<DefaultKeyedRateLimiter<Bucket>>>>,
    in_flight: AtomicUsize,
    tenant_in_flight: Mutex<PerKey<TenantId>>,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("config", &self.config)
            .field("instances", &self.instances)
            .field("in_flight", &self.in_flight)
            .finish_non_exhaustive()
    }
}

/// Held while an admitted call runs; frees its concurrency slots when dropped.
#[derive(Debug)]
pub struct Admitted {
    admission: Arc<Admission>,
    tenant: Option<TenantId>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.admission.in_flight.fetch_sub(1, Ordering::Relaxed);
        if let Some(tenant) = self.tenant {
            lock(&self.admission.tenant_in_flight).release(&tenant);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Admission {
    pub fn new(config: AdmissionConfig) -> Self {
        Self {
            config,
            instances: AtomicU32::new(1),
            clock: DefaultClock::default(),
            limiters: RwLock::new(HashMap::new()),
            in_flight: AtomicUsize::new(0),
            tenant_in_flight: Mutex::default(),
        }
    }

    pub fn config(&self) -> &AdmissionConfig {
        &self.config
    }

    /// How many live instances share each limit (at least 1).
    pub fn set_instances(&self, n: u32) {
        self.instances.store(n.max(1), Ordering::Relaxed);
    }

    pub fn instances(&self) -> u32 {
        self.instances.load(Ordering::Relaxed)
    }

    /// Calls running now on this instance.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Admits a call of `tool` by `auth` under the tenant's `limits` (already combined
    /// with the operator's defaults), with `audit_backlog` records waiting in the audit
    /// queue; or says which limit refused it.
    pub fn admit(
        self: &Arc<Self>,
        auth: &AuthContext,
        tool: &str,
        limits: &RateLimits,
        audit_backlog: usize,
    ) -> Result<Admitted, Refusal> {
        if audit_backlog >= self.config.max_audit_backlog {
            return Err(shed(
                Limit::AuditBacklog,
                "the gateway's audit log is behind, so it takes no new calls for a moment",
            ));
        }
        if self.in_flight.fetch_add(1, Ordering::Relaxed) >= self.config.max_in_flight {
            self.in_flight.fetch_sub(1, Ordering::Relaxed);
            return Err(shed(
                Limit::InFlight,
                "the gateway runs as many calls as it can at once; try again shortly",
            ));
        }
        // From here the in-flight slot is the guard's to free.
        let mut admitted = Admitted {
            admission: self.clone(),
            tenant: None,
        };
        let tenant = auth.tenant;
        let share = self.instances();
        if let Some(limit) = limits.tenant_concurrency {
            let allowed = limit.div_ceil(share);
            let cap = usize::try_from(allowed).unwrap_or(usize::MAX);
            if lock(&self.tenant_in_flight).try_add(tenant, cap).is_err() {
                return Err(Refusal {
                    limit: Limit::Concurrency,
                    error: limited(
                        format!(
                            "your tenant already has {allowed} calls running at once, its limit; try again when one finishes"
                        ),
                        Duration::from_secs(1),
                    ),
                });
            }
            admitted.tenant = Some(tenant);
        }
        let checks = [
            (
                limits
                    .tenant_per_minute
                    .map(|n| (n, Bucket::Tenant(tenant))),
                Limit::Tenant,
            ),
            (
                limits
                    .principal_per_minute
                    .map(|n| (n, Bucket::Principal(tenant, auth.principal.id))),
                Limit::Principal,
            ),
            // The name is hashed only when its tool has a limit (most have none).
            (
                limits
                    .tools
                    .get(tool)
                    .map(|&n| (n, Bucket::Tool(tenant, tool_hash(tool)))),
                Limit::Tool,
            ),
        ];
        for (set, limit) in checks {
            let Some((n, bucket)) = set else {
                continue;
            };
            if let Err((per_minute, wait)) = self.take(n, share, &bucket) {
                let what = match limit {
                    Limit::Tenant => "your tenant's calls-per-minute limit".to_owned(),
                    Limit::Principal => "your calls-per-minute limit".to_owned(),
                    _ => format!("your tenant's calls-per-minute limit for {tool}"),
                };
                return Err(Refusal {
                    limit,
                    error: limited(
                        format!("{what} ({per_minute} on this instance) is used up"),
                        wait,
                    ),
                });
            }
        }
        Ok(admitted)
    }

    /// Admits one REST read by `auth`'s principal under
    /// [`AdmissionConfig::principal_reads_per_minute`] (this instance's share of it), or
    /// refuses it (`rate_limited`, with when to try again).
    pub fn admit_read(&self, auth: &AuthContext) -> Result<(), Refusal> {
        let Some(n) = self.config.principal_reads_per_minute else {
            return Ok(());
        };
        let bucket = Bucket::Reads(auth.tenant, auth.principal.id);
        self.take(n, self.instances(), &bucket)
            .map_err(|(per_minute, wait)| Refusal {
                limit: Limit::Reads,
                error: limited(
                    format!(
                        "your reads-per-minute limit ({per_minute} on this instance) is used up"
                    ),
                    wait,
                )
                .with_suggestion("wait for retry_after_secs, then ask again"),
            })
    }

    /// Takes one from `bucket`, whose limit is `n` per minute shared by `share`
    /// instances; when it is used up, this instance's rate and how long until the bucket
    /// admits again.
    fn take(&self, n: u32, share: u32, bucket: &Bucket) -> Result<(), (NonZeroU32, Duration)> {
        let Some(per_minute) = NonZeroU32::new(n.div_ceil(share)) else {
            return Ok(());
        };
        self.limiter(per_minute)
            .check_key(bucket)
            .map_err(|not_until| (per_minute, not_until.wait_time_from(self.clock.now())))
    }

    fn limiter(&self, per_minute: NonZeroU32) -> Arc<DefaultKeyedRateLimiter<Bucket>> {
        if let Some(limiter) = self
            .limiters
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&per_minute)
        {
            return limiter.clone();
        }
        self.limiters
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(per_minute)
            .or_insert_with(|| {
                Arc::new(governor::RateLimiter::dashmap(Quota::per_minute(
                    per_minute,
                )))
            })
            .clone()
    }

    /// Forgets buckets that are full again (idle long enough to admit a whole burst), so
    /// memory follows the callers active in the last minute. Call periodically.
    pub fn sweep(&self) {
        let limiters = self
            .limiters
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for limiter in limiters.values() {
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
    }

    /// Buckets held now, over every rate.
    pub fn buckets(&self) -> usize {
        self.limiters
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .map(|l| l.len())
            .sum()
    }
}

fn tool_hash(tool: &str) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    tool.hash(&mut hasher);
    hasher.finish()
}

/// A `rate_limited` error asking to come back after `wait` (at least a second).
fn limited(message: String, wait: Duration) -> ToolError {
    ToolError::new(ErrorKind::RateLimited, message)
        .with_retry_after(wait, true)
        .with_suggestion("wait for retry_after_secs, then make the same call again")
}

fn shed(limit: Limit, message: &str) -> Refusal {
    Refusal {
        limit,
        error: ToolError::new(ErrorKind::Unavailable, message)
            .with_retry_after(Duration::from_secs(crate::error::RETRY_AFTER_SECS), true)
            .with_suggestion("make the same call again shortly"),
    }
}

#[cfg(test)]
mod tests;
