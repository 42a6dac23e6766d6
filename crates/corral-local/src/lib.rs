//! The embedded shell: Corral on one machine with nothing to install. It observes local
//! processes, calls corral-core (scheduler, lifecycle, launch contract), applies the decisions
//! and records the outcome in a SQLite store. It decides nothing itself.
