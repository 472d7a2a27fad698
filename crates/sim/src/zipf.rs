//! A Zipf(n, alpha) sampler over ranks `1..=n`: P(k) is proportional to
//! `k^-alpha`. It uses rejection-inversion (Hörmann & Derflinger, 1996), the
//! method of Apache Commons RNG's Zipf sampler, so it needs O(1) memory and
//! O(1) expected time per sample for any `n` and any `alpha >= 0` (0 is
//! uniform, 1 the classic Zipf). Not here: mapping ranks to keys.

use rand::RngExt;

/// Zipf distribution over `1..=n` with exponent `alpha`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Zipf {
    n: f64,
    alpha: f64,
    h_integral_x1: f64,
    h_integral_n: f64,
    s: f64,
}

impl Zipf {
    /// A sampler over `1..=n`; `n >= 1`, `alpha` finite and `>= 0`.
    pub fn new(n: u64, alpha: f64) -> Result<Zipf, String> {
        if n == 0 {
            return Err("Zipf needs at least one key".into());
        }
        if !(alpha.is_finite() && alpha >= 0.0) {
            return Err(format!(
                "Zipf exponent must be finite and >= 0, got {alpha}"
            ));
        }
        let mut z = Zipf {
            n: n as f64,
            alpha,
            h_integral_x1: 0.0,
            h_integral_n: 0.0,
            s: 0.0,
        };
        z.h_integral_x1 = z.h_integral(1.5) - 1.0;
        z.h_integral_n = z.h_integral(z.n + 0.5);
        z.s = 2.0 - z.h_integral_inverse(z.h_integral(2.5) - z.h(2.0));
        Ok(z)
    }

    /// Number of ranks.
    pub fn n(&self) -> u64 {
        self.n as u64
    }

    /// Draws a rank in `1..=n` (1 is the most popular).
    pub fn sample<R: RngExt + ?Sized>(&self, rng: &mut R) -> u64 {
        loop {
            let u =
                self.h_integral_n + rng.random::<f64>() * (self.h_integral_x1 - self.h_integral_n);
            let x = self.h_integral_inverse(u);
            let k = (x + 0.5).floor().clamp(1.0, self.n);
            if k - x <= self.s || u >= self.h_integral(k + 0.5) - self.h(k) {
                return k as u64;
            }
        }
    }

    /// `x^-alpha`.
    fn h(&self, x: f64) -> f64 {
        (-self.alpha * x.ln()).exp()
    }

    /// An antiderivative of `h`, continuous in `alpha` (including 1).
    fn h_integral(&self, x: f64) -> f64 {
        let log_x = x.ln();
        helper2((1.0 - self.alpha) * log_x) * log_x
    }

    fn h_integral_inverse(&self, x: f64) -> f64 {
        let t = (x * (1.0 - self.alpha)).max(-1.0);
        (helper1(t) * x).exp()
    }
}

/// `ln(1 + x) / x`, accurate near 0.
fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// `(e^x - 1) / x`, accurate near 0.
fn helper2(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    fn exact_pmf(n: u64, alpha: f64) -> Vec<f64> {
        let w: Vec<f64> = (1..=n).map(|k| (k as f64).powf(-alpha)).collect();
        let total: f64 = w.iter().sum();
        w.into_iter().map(|x| x / total).collect()
    }

    #[test]
    fn matches_the_exact_distribution() {
        for alpha in [0.0, 0.5, 0.99, 1.0, 1.3, 2.0] {
            let n = 12;
            let z = Zipf::new(n, alpha).unwrap();
            let mut rng = StdRng::seed_from_u64(7);
            let draws = 200_000;
            let mut counts = vec![0u64; n as usize];
            for _ in 0..draws {
                let k = z.sample(&mut rng);
                assert!((1..=n).contains(&k));
                counts[k as usize - 1] += 1;
            }
            for (k, (c, p)) in counts.iter().zip(exact_pmf(n, alpha)).enumerate() {
                let got = *c as f64 / draws as f64;
                assert!(
                    (got - p).abs() < 0.005,
                    "alpha {alpha} rank {}: got {got:.4}, want {p:.4}",
                    k + 1
                );
            }
        }
    }

    #[test]
    fn single_rank_and_bad_parameters() {
        let z = Zipf::new(1, 1.0).unwrap();
        let mut rng = StdRng::seed_from_u64(1);
        assert!((0..100).all(|_| z.sample(&mut rng) == 1));
        assert!(Zipf::new(0, 1.0).is_err());
        assert!(Zipf::new(10, -0.5).is_err());
        assert!(Zipf::new(10, f64::NAN).is_err());
    }
}
