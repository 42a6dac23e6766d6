//! Quantities (`500m`, `16Gi`): parsed exactly, with the bounds beyond which a value is
//! a typo (a missing suffix, more than any node holds).

use crate::quantity::Quantity;
use crate::queue::ResourceAmounts;

use super::{MAX_CPU_CORES, MAX_MEMORY_BYTES, MIN_MEMORY_BYTES, ValidationErrors};

pub(super) fn check_quantity(
    path: &str,
    q: &Quantity,
    errs: &mut ValidationErrors,
) -> Option<u128> {
    match q.milli() {
        Ok(v) => Some(v),
        Err(e) => {
            errs.push(path, e.to_string());
            None
        }
    }
}

pub(super) fn check_cpu(path: &str, q: &Quantity, errs: &mut ValidationErrors) {
    if let Some(milli) = check_quantity(path, q, errs) {
        if milli == 0 {
            errs.push(
                path,
                "must be more than 0; write e.g. \"500m\" or 2, or remove it",
            );
        } else if milli > MAX_CPU_CORES * 1000 {
            errs.push(
                path,
                format!("`{q}` is more than {MAX_CPU_CORES} cores; no node has that many"),
            );
        }
    }
}

pub(super) fn check_memory(path: &str, q: &Quantity, errs: &mut ValidationErrors) {
    if let Some(milli) = check_quantity(path, q, errs) {
        let bytes = milli.div_ceil(1000);
        if bytes == 0 {
            errs.push(
                path,
                "must be more than 0; write e.g. \"16Gi\", or remove it",
            );
        } else if bytes < MIN_MEMORY_BYTES {
            errs.push(
                path,
                format!("`{q}` is only {bytes} bytes; memory is in bytes, so write a suffix, e.g. \"{q}Gi\" or \"{q}Mi\""),
            );
        } else if bytes > MAX_MEMORY_BYTES {
            errs.push(
                path,
                format!("`{q}` is more than 64Ti; no node has that much"),
            );
        }
    }
}

pub(super) fn check_amounts(path: &str, a: &ResourceAmounts, errs: &mut ValidationErrors) {
    if let Some(cpu) = &a.cpu {
        check_quantity(&format!("{path}.cpu"), cpu, errs);
    }
    if let Some(m) = &a.memory {
        check_quantity(&format!("{path}.memory"), m, errs);
    }
}
