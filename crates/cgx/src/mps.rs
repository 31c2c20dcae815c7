//! `cgx bench mps`: the MPS inner product of `docs/SPEC.md` §8.2, timed per
//! contraction step, beside its kernels run alone (the engine's overhead is the difference).
//! `benches/scripts/compare_einsum.py` reads its `--json` output.

use std::time::Instant;

use clap::Args;
use workloads::einsum::{StepTimes, mps};

use crate::cli::CliResult;
use crate::table::{Table, json_number};

/// Options of `cgx bench mps`.
#[derive(Args, Debug, Clone)]
pub struct MpsArgs {
    /// Sites of the MPS (the network has 2·sites operands and 2·sites − 1 steps).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(2..=1_000_000))]
    pub sites: u32,
    /// Bond dimension χ (the physical dimension is 2).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub chi: u32,
    /// Rounds; each round evaluates the network (and its kernels alone) about 200 000 steps'
    /// worth of times, and the best round counts.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: u32,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// What a run measured.
pub struct MpsReport {
    /// Sites and bond dimension.
    pub sites: usize,
    /// Bond dimension.
    pub chi: usize,
    /// Building and compiling the network, ms.
    pub build_ms: f64,
    /// The result ⟨ψ|ψ⟩ (`compare_einsum.py` checks it against numpy's).
    pub value: f64,
    /// Per-step times.
    pub times: StepTimes,
}

impl MpsReport {
    /// The report as a table.
    pub fn table(&self) -> String {
        let t = &self.times;
        let mut table = Table::new(&["sites", "χ", "steps", "µs/step", "kernels µs/step", "overhead µs/step"]);
        table.row(vec![
            self.sites.to_string(),
            self.chi.to_string(),
            t.steps.to_string(),
            format!("{:.3}", t.per_step_us),
            format!("{:.3}", t.kernel_per_step_us),
            format!("{:.3}", t.overhead_us()),
        ]);
        table.render()
    }

    /// The report as one JSON object.
    pub fn json(&self) -> String {
        let t = &self.times;
        format!(
            "{{\"sites\":{},\"chi\":{},\"steps\":{},\"value\":{},\"build_ms\":{},\"per_step_us\":{},\"kernel_per_step_us\":{},\"overhead_per_step_us\":{}}}",
            self.sites,
            self.chi,
            t.steps,
            json_number(self.value),
            json_number(self.build_ms),
            json_number(t.per_step_us),
            json_number(t.kernel_per_step_us),
            json_number(t.overhead_us()),
        )
    }
}

/// Runs the benchmark.
pub fn measure(args: &MpsArgs) -> MpsReport {
    let (sites, chi) = (args.sites as usize, args.chi as usize);
    let net = mps(sites, chi);
    let t = Instant::now();
    let e = net.einsum();
    let build_ms = t.elapsed().as_secs_f64() * 1e3;
    let value = e.eval(&net.refs()).map_or(f64::NAN, |r| r.data()[0]);
    let times = StepTimes::measure(&net, args.rounds as usize, 200_000);
    MpsReport { sites, chi, build_ms, value, times }
}

/// `cgx bench mps`.
pub fn run(args: &MpsArgs) -> CliResult {
    let r = measure(args);
    if args.json {
        println!("{}", r.json());
    } else {
        println!(
            "MPS inner product ⟨ψ|ψ⟩ = {:.12e}, zipper path, f64, one thread; build + compile {:.2} ms",
            r.value, r.build_ms
        );
        print!("{}", r.table());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_mps_reports_per_step_times() {
        let r = measure(&MpsArgs { sites: 3, chi: 2, rounds: 1, json: true });
        assert_eq!(r.times.steps, 5);
        let j = r.json();
        assert!(j.starts_with("{\"sites\":3,\"chi\":2,\"steps\":5,\"value\":"), "{j}");
        assert!(r.value.is_finite() && r.value > 0.0);
        assert!(j.contains("\"per_step_us\":") && j.contains("\"overhead_per_step_us\":"), "{j}");
    }
}
