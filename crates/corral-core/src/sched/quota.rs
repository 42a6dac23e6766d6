//! Queues, quotas per pool, borrowing and lending within a cohort (Kueue's model), and
//! fair share by weighted dominant resource share.
//!
//! For a queue in a cohort, per pool and resource: `guaranteed = nominal - lendingLimit`
//! (0 without a lending limit) is never lent; the cohort's capacity is the sum of what its
//! members may lend, and every member's usage above its guaranteed part draws on it. A queue
//! borrows when its usage exceeds its nominal quota, at most `borrowingLimit` above it.

use std::collections::{BTreeMap, HashMap};

use super::explain::{Blocker, QuotaResource};
use super::index::PoolState;
use super::model::{QueueConfig, ResourceAmount};

pub(crate) type Amount = [u64; 3];

const RESOURCES: [QuotaResource; 3] = [
    QuotaResource::Gpu,
    QuotaResource::Cpu,
    QuotaResource::Memory,
];

#[derive(Clone, Debug)]
pub(crate) struct QuotaCell {
    pub nominal: Amount,
    pub borrowing_limit: Option<Amount>,
    pub lending_limit: Option<Amount>,
    pub usage: Amount,
}

impl QuotaCell {
    fn guaranteed(&self, r: usize) -> u64 {
        match self.lending_limit {
            Some(l) => self.nominal[r].saturating_sub(l[r]),
            None => 0,
        }
    }
    fn lendable(&self, r: usize) -> u64 {
        self.nominal[r] - self.guaranteed(r)
    }
}

pub(crate) struct QueueState {
    pub name: String,
    pub cohort: Option<u32>,
    pub weight: u64,
    /// Namespaces that may use the queue (empty: all).
    pub namespaces: Vec<String>,
    /// One cell per pool.
    pub cells: Vec<QuotaCell>,
    pub usage_total: Amount,
}

#[derive(Clone, Debug, Default)]
struct CohortCell {
    capacity: Amount,
    usage: Amount,
}

struct CohortState {
    name: String,
    cells: Vec<CohortCell>,
}

pub(crate) struct Quotas {
    pub queues: Vec<QueueState>,
    cohorts: Vec<CohortState>,
    pub by_name: HashMap<String, u32>,
    cluster_total: Amount,
}

fn add(a: Amount, b: Amount) -> Amount {
    [
        a[0].saturating_add(b[0]),
        a[1].saturating_add(b[1]),
        a[2].saturating_add(b[2]),
    ]
}

impl Quotas {
    pub fn new(configs: &[QueueConfig], pools: &[PoolState], cluster_total: [u64; 3]) -> Self {
        let mut cohort_ids: BTreeMap<&str, u32> = BTreeMap::new();
        let mut cohorts = Vec::new();
        let mut queues = Vec::with_capacity(configs.len());
        let mut by_name = HashMap::new();
        for q in configs {
            let cohort = q.cohort.as_deref().map(|c| {
                *cohort_ids.entry(c).or_insert_with(|| {
                    cohorts.push(CohortState {
                        name: c.to_string(),
                        cells: vec![CohortCell::default(); pools.len()],
                    });
                    cohorts.len() as u32 - 1
                })
            });
            let cells: Vec<QuotaCell> = pools
                .iter()
                .map(|p| match q.quotas.get(&p.name) {
                    Some(pq) => QuotaCell {
                        nominal: pq.nominal.as_array(),
                        borrowing_limit: pq.borrowing_limit.map(ResourceAmount::as_array),
                        lending_limit: pq.lending_limit.map(ResourceAmount::as_array),
                        usage: [0; 3],
                    },
                    None => QuotaCell {
                        nominal: [0; 3],
                        borrowing_limit: None,
                        lending_limit: None,
                        usage: [0; 3],
                    },
                })
                .collect();
            if let Some(c) = cohort {
                for (pi, cell) in cells.iter().enumerate() {
                    let cc = &mut cohorts[c as usize].cells[pi];
                    cc.capacity = add(
                        cc.capacity,
                        [cell.lendable(0), cell.lendable(1), cell.lendable(2)],
                    );
                }
            }
            // A later duplicate name is ignored; lookups find the first.
            by_name.entry(q.name.clone()).or_insert(queues.len() as u32);
            queues.push(QueueState {
                name: q.name.clone(),
                cohort,
                weight: u64::from(q.weight.max(1)),
                namespaces: q.namespaces.clone(),
                cells,
                usage_total: [0; 3],
            });
        }
        Quotas {
            queues,
            cohorts,
            by_name,
            cluster_total,
        }
    }

    /// Whether queue `q` may use `req` more in `pool`; the blocker says why not.
    pub fn check(
        &self,
        q: u32,
        pool: u16,
        req: Amount,
        pools: &[PoolState],
    ) -> Result<(), Box<Blocker>> {
        let queue = &self.queues[q as usize];
        let cell = &queue.cells[pool as usize];
        for r in 0..3 {
            if req[r] == 0 {
                continue;
            }
            let used = cell.usage[r];
            let new = used.saturating_add(req[r]);
            let fits = match queue.cohort {
                None => new <= cell.nominal[r],
                Some(c) => {
                    let within_borrow = match cell.borrowing_limit {
                        Some(b) => new <= cell.nominal[r].saturating_add(b[r]),
                        None => true,
                    };
                    let g = cell.guaranteed(r);
                    let delta = new.saturating_sub(g) - used.saturating_sub(g);
                    let cc = &self.cohorts[c as usize].cells[pool as usize];
                    within_borrow && cc.usage[r].saturating_add(delta) <= cc.capacity[r]
                }
            };
            if !fits {
                return Err(Box::new(self.blocker(q, pool, r, req[r], pools)));
            }
        }
        Ok(())
    }

    /// Why queue `q` could never hold `req` in `pool`, even with nothing else running: what
    /// [`Quotas::check`] says at zero usage (usage only makes it stricter). The most the
    /// queue may ever use there is its nominal quota without a cohort; in one, its
    /// guaranteed part plus all its cohort may lend, within its borrowing limit.
    pub fn never_admits(
        &self,
        q: u32,
        pool: u16,
        req: Amount,
        pools: &[PoolState],
    ) -> Option<Blocker> {
        let queue = &self.queues[q as usize];
        let cell = &queue.cells[pool as usize];
        (0..3).find_map(|r| {
            let most = match queue.cohort {
                None => cell.nominal[r],
                Some(c) => {
                    let cc = &self.cohorts[c as usize].cells[pool as usize];
                    let borrow = match cell.borrowing_limit {
                        Some(b) => cell.nominal[r].saturating_add(b[r]),
                        None => u64::MAX,
                    };
                    borrow.min(cell.guaranteed(r).saturating_add(cc.capacity[r]))
                }
            };
            (req[r] > most).then(|| {
                let p = &pools[pool as usize];
                Blocker::NoQuota {
                    queue: queue.name.clone(),
                    pool: p.name.clone(),
                    gpu_type: p.gpu_type.clone(),
                    resource: RESOURCES[r],
                    requested: req[r],
                    most,
                    cohort: queue.cohort.map(|c| self.cohorts[c as usize].name.clone()),
                }
            })
        })
    }

    fn blocker(&self, q: u32, pool: u16, r: usize, requested: u64, pools: &[PoolState]) -> Blocker {
        let queue = &self.queues[q as usize];
        let cell = &queue.cells[pool as usize];
        let cohort_can_lend = match queue.cohort {
            None => 0,
            Some(c) => {
                let cc = &self.cohorts[c as usize].cells[pool as usize];
                let free = cc.capacity[r].saturating_sub(cc.usage[r]);
                // The queue's own unused lendable quota is part of the cohort's free room
                // but is not a loan; leave it out.
                let own_unused = cell
                    .lendable(r)
                    .saturating_sub(cell.usage[r].saturating_sub(cell.guaranteed(r)));
                free.saturating_sub(own_unused)
            }
        };
        let p = &pools[pool as usize];
        Blocker::Quota {
            queue: queue.name.clone(),
            pool: p.name.clone(),
            gpu_type: p.gpu_type.clone(),
            resource: RESOURCES[r],
            used: cell.usage[r],
            requested,
            nominal: cell.nominal[r],
            borrowing_limit: cell.borrowing_limit.map(|b| b[r]),
            cohort: queue.cohort.map(|c| self.cohorts[c as usize].name.clone()),
            cohort_can_lend,
        }
    }

    pub fn charge(&mut self, q: u32, pool: u16, req: Amount) {
        self.update(q, pool, req, true);
    }

    pub fn refund(&mut self, q: u32, pool: u16, req: Amount) {
        self.update(q, pool, req, false);
    }

    #[allow(clippy::needless_range_loop)] // r indexes four parallel arrays
    fn update(&mut self, q: u32, pool: u16, req: Amount, charging: bool) {
        let queue = &mut self.queues[q as usize];
        let cell = &mut queue.cells[pool as usize];
        for r in 0..3 {
            let old = cell.usage[r];
            let new = if charging {
                old.saturating_add(req[r])
            } else {
                old.saturating_sub(req[r])
            };
            cell.usage[r] = new;
            queue.usage_total[r] = if charging {
                queue.usage_total[r].saturating_add(req[r])
            } else {
                queue.usage_total[r].saturating_sub(req[r])
            };
            if let Some(c) = queue.cohort {
                let g = cell.guaranteed(r);
                let cc = &mut self.cohorts[c as usize].cells[pool as usize];
                cc.usage[r] = cc.usage[r]
                    .saturating_add(new.saturating_sub(g))
                    .saturating_sub(old.saturating_sub(g));
            }
        }
    }

    /// Whether queue `q` stays within its nominal quota in `pool` after using `req` more.
    pub fn within_nominal(&self, q: u32, pool: u16, req: Amount) -> bool {
        let cell = &self.queues[q as usize].cells[pool as usize];
        (0..3).all(|r| cell.usage[r].saturating_add(req[r]) <= cell.nominal[r])
    }

    /// Whether the queue's nominal GPU quota in the pool is unlimited (nothing guaranteed
    /// that taking work away could break).
    pub fn nominal_unlimited(&self, q: u32, pool: u16) -> bool {
        self.queues[q as usize].cells[pool as usize].nominal[0] == u64::MAX
    }

    /// Whether queue `q` uses more than its nominal quota in `pool`.
    pub fn is_borrowing(&self, q: u32, pool: u16) -> bool {
        let cell = &self.queues[q as usize].cells[pool as usize];
        (0..3).any(|r| cell.usage[r] > cell.nominal[r])
    }

    pub fn same_cohort(&self, a: u32, b: u32) -> bool {
        let ca = self.queues[a as usize].cohort;
        ca.is_some() && ca == self.queues[b as usize].cohort
    }

    /// Weighted dominant resource share, in parts per billion.
    pub fn dominant_share(&self, q: u32) -> u64 {
        let queue = &self.queues[q as usize];
        let mut share = 0u128;
        for r in 0..3 {
            if self.cluster_total[r] > 0 {
                let s = u128::from(queue.usage_total[r]) * 1_000_000_000
                    / u128::from(self.cluster_total[r]);
                share = share.max(s);
            }
        }
        (share / u128::from(queue.weight)).min(u128::from(u64::MAX)) as u64
    }

    pub fn usage(&self, q: u32, pool: u16) -> Amount {
        self.queues[q as usize].cells[pool as usize].usage
    }
}
