"""The independent reference of the results' statistics, for e2e/tests/results/statistics.rs and
e2e/tests/results/simulation.rs: scipy, statsmodels and GrowthBook's own gbstats, as
published on PyPI (pinned in requirements.txt beside this file; scripts/lib.sh's
ensure_stats_python installs them). Nothing here is shared with the Rust code.

Reads one JSON document on stdin and writes the answers as one JSON document on stdout:

    {"pairs": [{"variant": [exposed, converted], "control": [exposed, converted],
                "tuning": 5000}, ...],
     "families": [[p, ...], ...],
     "welch": [{"variant": [n, mean, variance], "control": [n, mean, variance]}, ...],
     "srm": [{"counts": [n, ...], "weights": [w, ...]}, ...],
     "metrics": [{"events": [...], "metrics": [...], "controls": [...], "treatments": k,
                  "tuning": 5000}, ...]}

(see `metrics` below for the last).

A statistic that comes out infinite, NaN, or as an interval of zero width is answered
null: the Rust side must give none either.
"""

import json
import math
import sys
import warnings

import numpy as np
from gbstats.frequentist.tests import (
    FrequentistConfig,
    SequentialConfig,
    SequentialTwoSidedTTest,
    TwoSidedTTest,
)
from gbstats.models.statistics import ProportionStatistic
from scipy import special, stats
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import (
    confint_proportions_2indep,
    proportion_confint,
    proportions_ztest,
    test_proportions_2indep,
)

ALPHA = 0.05
# The two-sided 95% quantile of the normal distribution.
Z_95 = float(stats.norm.ppf(1 - ALPHA / 2))


def finite(*xs):
    return all(x is not None and math.isfinite(x) for x in xs)


def pooled_se(x1, n1, x0, n0):
    """The standard error of p1 - p0 under no effect, one rate pooled for both arms
    (statsmodels' proportions_ztest's); for numbers or numpy arrays."""
    pooled = (x1 + x0) / (n1 + n0)
    return np.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n0))


def mixture_p(z, n_rho2):
    """The inverse of the normal mixture's likelihood ratio at z after n visitors
    (n_rho2 = n rho^2), for one treatment; for numbers or numpy arrays."""
    return np.sqrt(1 + n_rho2) * np.exp(-z * z / 2 * n_rho2 / (1 + n_rho2))


def interval(low, high):
    low, high = float(low), float(high)
    return [low, high] if finite(low, high) and high > low else None


def pair(case):
    """Every statistic of a variant (1) against the control (0)."""
    n1, x1 = case["variant"]
    n0, x0 = case["control"]
    out = {}
    # Wilson per arm, and Newcombe's hybrid score interval of p1 - p0.
    out["wilson_variant"] = interval(*proportion_confint(x1, n1, alpha=ALPHA, method="wilson"))
    out["wilson_control"] = interval(*proportion_confint(x0, n0, alpha=ALPHA, method="wilson"))
    out["diff"] = x1 / n1 - x0 / n0
    out["newcombe"] = interval(
        *confint_proportions_2indep(x1, n1, x0, n0, method="newcomb", compare="diff", alpha=ALPHA)
    )
    # Fisher's exact test, two-sided.
    out["fisher_p"] = float(stats.fisher_exact([[x1, n1 - x1], [x0, n0 - x0]])[1])
    # The lift, p1 / p0 - 1, on the log ratio.
    lift = None
    if x0 > 0 and x1 > 0:
        low, high = confint_proportions_2indep(
            x1, n1, x0, n0, method="log", compare="ratio", alpha=ALPHA
        )
        test = test_proportions_2indep(x1, n1, x0, n0, method="log", compare="ratio")
        ci = interval(low - 1.0, high - 1.0)
        if ci is not None and finite(test.pvalue):
            lift = {
                "value": (x1 / n1) / (x0 / n0) - 1.0,
                "low": ci[0],
                "high": ci[1],
                "p_value": float(test.pvalue),
            }
    out["lift"] = lift
    # The view's fixed horizon: the unpooled z-test of p1 - p0 (statsmodels' wald), given
    # only where both arms have variance (gbstats refuses otherwise) and the counts pass
    # the minimum-data guard (case["minimums"]: visitors per arm, conversions and
    # non-conversions together).
    p1, p0 = x1 / n1, x0 / n0
    se = math.sqrt(p1 * (1 - p1) / n1 + p0 * (1 - p0) / n0)
    min_visitors, min_conversions = case.get("minimums", [0, 0])
    testable = (
        0 < x1 < n1
        and 0 < x0 < n0
        and min(n1, n0) >= min_visitors
        and x1 + x0 >= min_conversions
        and (n1 + n0) - (x1 + x0) >= min_conversions
    )
    out["testable"] = testable
    z_test = None
    if se > 0 and testable:
        low, high = confint_proportions_2indep(
            x1, n1, x0, n0, method="wald", compare="diff", alpha=ALPHA
        )
        # The test under its null: one pooled rate (statsmodels' proportions_ztest).
        _, p_pooled = proportions_ztest([x1, x0], [n1, n0])
        z_test = {"ci": interval(low, high), "p_value": float(p_pooled)}
    out["z_test"] = z_test
    # The view's always-valid interval: gbstats' sequential two-sided test, absolute
    # difference, on the larger of the unpooled standard error (gbstats') and the pooled
    # one under no effect (statsmodels' proportions_ztest's): its half-width scaled by
    # their ratio. Its p-value from the mixture likelihood ratio, computed here with the
    # same standard error.
    always_valid = None
    if se > 0 and testable:
        tuning = float(case.get("tuning", 5000))
        # Several treatments share the error rate (Bonferroni): each is tested at
        # ALPHA / family, its p-value multiplied by the family.
        family = int(case.get("family", 1))
        alpha = ALPHA / family
        config = SequentialConfig(
            difference_type="absolute", sequential_tuning_parameter=tuning, alpha=alpha
        )
        seq = SequentialTwoSidedTTest(
            ProportionStatistic(n=n0, sum=x0), ProportionStatistic(n=n1, sum=x1), config
        )
        se_null = float(pooled_se(x1, n1, x0, n0))
        widen = max(1.0, se_null / se)
        low, high = seq.confidence_interval
        half = (high - low) / 2 * widen
        n = n0 + n1
        rho2 = (-2 * np.log(alpha) + np.log(-2 * np.log(alpha) + 1)) / tuning
        z = (p1 - p0) / max(se, se_null)
        p_mixture = float(mixture_p(z, n * rho2))
        always_valid = {
            "ci": interval(out["diff"] - half, out["diff"] + half),
            "p_value": min(1.0, family * p_mixture),
            # gbstats' own p-value, where its (unpooled) standard error is the larger.
            "p_value_gbstats": min(1.0, family * float(seq.p_value)) if widen == 1.0 else None,
        }
    out["always_valid"] = always_valid
    # The view's lift: gbstats' relative difference (the ratio of the means, its variance by
    # the delta method), a z interval as the view's difference has, and gbstats' sequential
    # interval of it widened as the difference's.
    relative = None
    if se > 0 and testable:
        arms = (ProportionStatistic(n=n0, sum=x0), ProportionStatistic(n=n1, sum=x1))
        fixed = TwoSidedTTest(*arms, FrequentistConfig(difference_type="relative"))
        value, half = fixed.point_estimate, Z_95 * math.sqrt(fixed.variance)
        seq = SequentialTwoSidedTTest(
            *arms,
            SequentialConfig(
                difference_type="relative",
                sequential_tuning_parameter=float(case.get("tuning", 5000)),
                alpha=ALPHA / int(case.get("family", 1)),
            ),
        )
        low, high = seq.confidence_interval
        widen = max(1.0, float(pooled_se(x1, n1, x0, n0)) / se)
        relative = {
            "value": value,
            "ci": interval(value - half, value + half),
            "always_valid_ci": interval(
                value - (high - low) / 2 * widen, value + (high - low) / 2 * widen
            ),
        }
    out["relative"] = relative
    return out


def family(p_values):
    if not p_values:
        return {"holm": [], "bh": [], "bonferroni": []}
    return {
        "holm": multipletests(p_values, alpha=ALPHA, method="holm")[1].tolist(),
        "bh": multipletests(p_values, alpha=ALPHA, method="fdr_bh")[1].tolist(),
        "bonferroni": multipletests(p_values, alpha=ALPHA, method="bonferroni")[1].tolist(),
    }


def welch(case):
    (n1, m1, v1), (n0, m0, v0) = case["variant"], case["control"]
    if n1 < 2 or n0 < 2 or v1 / n1 + v0 / n0 <= 0:
        return None
    result = stats.ttest_ind_from_stats(
        m1, math.sqrt(v1), n1, m0, math.sqrt(v0), n0, equal_var=False
    )
    return {"diff": m1 - m0, "p_value": float(result.pvalue)}


def srm(case):
    counts = np.asarray(case["counts"], dtype=float)
    weights = np.asarray(case["weights"], dtype=float)
    if counts.sum() == 0:
        return None
    expected = counts.sum() * weights / weights.sum()
    return float(stats.chisquare(counts, expected).pvalue)


def srm_sequential(case):
    """The sequential sample-ratio p-value after each look: 1 / the largest
    Dirichlet-multinomial Bayes factor so far of the counts against the weights (Lindon &
    Malek 2022), the prior centred on the weights with concentration `prior`."""
    weights = np.asarray(case["weights"], dtype=float)
    p = weights / weights.sum()
    alpha = case["prior"] * p
    best, out = -np.inf, []
    for counts in case["looks"]:
        x = np.asarray(counts, dtype=float)
        log_factor = (
            special.gammaln(alpha.sum())
            - special.gammaln(alpha.sum() + x.sum())
            + np.sum(special.gammaln(alpha + x) - special.gammaln(alpha))
            - np.sum(x * np.log(p))
        )
        best = max(best, float(log_factor))
        out.append(min(1.0, math.exp(-best)))
    return out


FIELDS = {"time_on_page": "timeOnPage", "scroll_depth": "scrollDepth", "load_time": "loadTime"}


def metric_values(case, metric):
    """Each exposed visitor's (variant, numerator, denominator, covariate, history) for one
    metric, from the raw events: post-exposure events of the experiment and phase from the
    first impression on; pre-exposure events of any experiment in the lookback before it
    (the history: 1 if there is any)."""
    events = case["events"]
    first = {}
    for e in events:
        if e["name"] == "impression" and e["experiment"] == case["experiment"]:
            v = e["visitor"]
            if v not in first or e["t"] < first[v][0]:
                first[v] = (e["t"], e["variant"])

    def measure(spec, chosen):
        def matches(e):
            return (
                (not spec.get("event") or e["name"] == spec["event"])
                and (not spec.get("target") or e.get("target", "") == spec["target"])
                and (not spec.get("conversion") or e["name"] == "conversion" or e.get("conversion") == 1)
            )
        hits = [e for e in chosen if matches(e)]
        field = spec.get("field")
        values = [e[FIELDS[field]] for e in hits if field and e.get(FIELDS[field]) is not None]
        agg = spec["aggregate"]
        if agg == "any":
            return 1.0 if hits else 0.0
        if agg == "count":
            return float(len(hits))
        if agg == "sum":
            return float(sum(values))
        if agg == "max":
            return float(max(values)) if values else 0.0
        if agg == "mean":
            return float(np.mean(values)) if values else 0.0
        if agg == "sessions":
            return float(len({e["session"] for e in hits}))
        raise ValueError(agg)

    rows = []
    lookback = metric.get("lookback_days", 14) * 86400000
    for visitor, (t0, variant) in sorted(first.items()):
        mine = [e for e in events if e["visitor"] == visitor]
        post = [e for e in mine if e["experiment"] == case["experiment"] and e["t"] >= t0]
        pre = [e for e in mine if t0 - lookback <= e["t"] < t0]
        y = measure(metric["numerator"], post)
        d = measure(metric["denominator"], post) if metric.get("denominator") else 1.0
        x = measure(metric["numerator"], pre)
        rows.append((variant, y, d, x, 1.0 if pre else 0.0))
    cap = metric.get("cap_value", 0)
    if not cap and metric.get("cap_percentile", 0):
        cap = float(np.percentile([r[1] for r in rows], metric["cap_percentile"] * 100))
    if cap:
        rows = [(v, min(y, cap), d, min(x, cap), h) for v, y, d, x, h in rows]
    return rows, cap


def metrics(case):
    """Every statistic of experiment_metric_results, per metric and treatment, from gbstats
    on the statistics of the raw events: TwoSidedTTest (fixed horizon),
    SequentialTwoSidedTTest at 5% / treatments (always valid), EffectBayesianABTest with
    its default prior (chance to beat the control), RegressionAdjustedStatistic with
    compute_theta (CUPED) or, where some visitors have a history and some none, on the
    covariate of numpy's least squares of the value on the covariate and the history; and
    the one-sided harm test of a guardrail by numerical
    integration of the normal mixture over harmful effects."""
    from gbstats.bayesian.tests import EffectBayesianABTest, EffectBayesianConfig
    from gbstats.frequentist.tests import FrequentistConfig, TwoSidedTTest
    from gbstats.models.statistics import (
        RatioStatistic,
        RegressionAdjustedStatistic,
        SampleMeanStatistic,
        compute_theta,
    )
    from scipy import integrate

    k = case["treatments"]
    alpha = ALPHA / k
    out = []
    for metric in case["metrics"]:
        rows, cap = metric_values(case, metric)
        kind = metric["kind"]

        def stat(ys, n):
            if kind == "proportion":
                return ProportionStatistic(n=n, sum=sum(ys))
            return SampleMeanStatistic(n=n, sum=sum(ys), sum_squares=sum(y * y for y in ys))

        def arm(variant):
            mine = [r for r in rows if r[0] == variant]
            n = len(mine)
            ys, ds, xs = [r[1] for r in mine], [r[2] for r in mine], [r[3] for r in mine]
            if kind == "ratio":
                plain = RatioStatistic(
                    n=n,
                    m_statistic=SampleMeanStatistic(n=n, sum=sum(ys), sum_squares=sum(y * y for y in ys)),
                    d_statistic=SampleMeanStatistic(n=n, sum=sum(ds), sum_squares=sum(d * d for d in ds)),
                    m_d_sum_of_products=sum(y * d for y, d in zip(ys, ds)),
                )
                return n, plain, None
            adjusted = RegressionAdjustedStatistic(
                n=n,
                post_statistic=stat(ys, n),
                pre_statistic=stat(xs, n),
                post_pre_sum_of_products=sum(y * x for y, x in zip(ys, xs)),
                theta=0,
            )
            return n, stat(ys, n), adjusted

        def always_valid(sequential, variance, null_variance, n):
            """The always-valid p-value and interval on the larger of gbstats' variance of
            the difference and the one under no effect: gbstats' interval widened by
            their ratio, the mixture's p-value computed with gbstats' rho."""
            v = max(variance, null_variance)
            d = sequential.point_estimate
            low, high = sequential.confidence_interval
            half = (high - low) / 2 * math.sqrt(v / variance)
            p = mixture_p(d / math.sqrt(v), n * sequential.rho ** 2)
            return float(min(1.0, k * p)), [float(d - half), float(d + half)], v

        n_a, a, a_adj = arm(metric["control"])
        for variant in metric["variants"]:
            n_b, b, b_adj = arm(variant)
            # Both arms' values as one sample: the variance of a visitor's value under no
            # effect (a ratio keeps its own).
            both = [r for r in rows if r[0] in (variant, metric["control"])]
            joint = None if kind == "ratio" else stat([r[1] for r in both], len(both))
            absolute = FrequentistConfig(difference_type="absolute")
            fixed = TwoSidedTTest(a, b, absolute)
            sequential = SequentialTwoSidedTTest(
                a, b, SequentialConfig(difference_type="absolute", alpha=alpha,
                                       sequential_tuning_parameter=case["tuning"]))
            null_variance = (
                fixed.variance if joint is None else joint.variance * (1 / n_a + 1 / n_b)
            )
            av_p, av_ci, av_variance = always_valid(
                sequential, fixed.variance, null_variance, n_a + n_b
            )
            better = metric.get("higher_is_better", True)
            bayes = EffectBayesianABTest(
                a, b, EffectBayesianConfig(difference_type="absolute", inverse=not better)
            ).compute_result()
            row = {
                "metric": metric["id"],
                "variant": variant,
                "visitors": n_b,
                "value": float(b.mean),
                "diff": float(fixed.point_estimate),
                "ci": [float(c) for c in fixed.confidence_interval],
                "p_value": float(fixed.p_value),
                "always_valid_p_value": av_p,
                "always_valid_ci": av_ci,
                "chance_to_beat_control": float(bayes.chance_to_win),
                "cap": cap,
            }
            if metric.get("role") == "guardrail":
                # The mixture N(0, tau^2) of the always-valid test (tau^2 = N rho^2 V),
                # restricted to the harmful half-line (density doubled), integrated.
                variance = av_variance
                n_rho2 = (n_a + n_b) * sequential.rho ** 2
                tau2 = n_rho2 * variance
                d = fixed.point_estimate

                def ratio(theta):
                    return math.exp((2 * theta * d - theta * theta) / (2 * variance)) \
                        * 2 * stats.norm.pdf(theta, 0, math.sqrt(tau2))
                lo, hi = (-np.inf, 0) if better else (0, np.inf)
                mixture = integrate.quad(ratio, lo, hi, epsabs=0, epsrel=1e-12, limit=200)[0]
                row["harm_p_value"] = min(1.0, k / mixture)
            if a_adj is not None:
                ys, xs = [r[1] for r in both], [r[3] for r in both]
                theta, covariate = compute_theta(a_adj, b_adj), None
                design = np.column_stack([np.ones(len(both)), xs, [r[4] for r in both]])
                x_varies = np.ptp(xs) > 0
                if np.ptp(design[:, 2]) > 0 and np.ptp(ys) > 0 and (
                    np.linalg.matrix_rank(design) == 3 or not x_varies
                ):
                    beta = np.linalg.lstsq(design, ys, rcond=None)[0]
                    theta = float(beta[1]) if x_varies else 0.0

                    def covariate(r):
                        return theta * r[3] + float(beta[2]) * r[4]

                def adjusted(mine):
                    """The arm's (or both arms') RegressionAdjustedStatistic: on x with
                    compute_theta's theta, or on the least squares' covariate whole."""
                    ys = [r[1] for r in mine]
                    if covariate is None:
                        zs, pre, coefficient = [r[3] for r in mine], stat, theta
                    else:
                        zs, coefficient = [covariate(r) for r in mine], 1.0

                        def pre(zs, n):
                            return SampleMeanStatistic(
                                n=n, sum=sum(zs), sum_squares=sum(z * z for z in zs))
                    return RegressionAdjustedStatistic(
                        n=len(mine),
                        post_statistic=stat(ys, len(mine)),
                        pre_statistic=pre(zs, len(mine)),
                        post_pre_sum_of_products=sum(y * z for y, z in zip(ys, zs)),
                        theta=coefficient,
                    )

                a_cuped = adjusted([r for r in rows if r[0] == metric["control"]])
                b_cuped = adjusted([r for r in rows if r[0] == variant])
                fixed_adj = TwoSidedTTest(a_cuped, b_cuped, absolute)
                seq_adj = SequentialTwoSidedTTest(
                    a_cuped, b_cuped, SequentialConfig(difference_type="absolute", alpha=alpha,
                                                   sequential_tuning_parameter=case["tuning"]))
                joint_adj = adjusted(both)
                cuped_p, cuped_ci, _ = always_valid(
                    seq_adj, fixed_adj.variance,
                    joint_adj.variance * (1 / n_a + 1 / n_b), n_a + n_b,
                )
                row["cuped"] = {
                    "theta": float(theta),
                    "history_theta": 0.0 if covariate is None else float(beta[2]),
                    "diff": float(fixed_adj.point_estimate),
                    "ci": [float(c) for c in fixed_adj.confidence_interval],
                    "p_value": float(fixed_adj.p_value),
                    "always_valid_p_value": cuped_p,
                    "always_valid_ci": cuped_ci,
                    "variance_reduction": float(1 - fixed_adj.variance / fixed.variance),
                }
            out.append(row)
    return out


def a_a_looks(case):
    """A/A experiments simulated on counts, many at once (numpy): visitors split by
    `weights` (the control first) at one `rate`, `looks` equal chunks, after each the
    always-valid p-value of every treatment against the control at 5% / treatments, with
    the view's guard. Answers the share of (experiment, treatment) pairs and of experiments
    with p < 0.05 at some look, for the view's standard error (the larger of unpooled and
    pooled) and for the unpooled one alone."""
    rng = np.random.default_rng(case["seed"])
    weights = np.array(case["weights"], dtype=float)
    weights /= weights.sum()
    arms, e, looks = len(weights), case["experiments"], case["looks"]
    k = arms - 1
    min_visitors, min_conversions = case["minimums"]
    bound = -2 * math.log(ALPHA / k)
    rho2 = (bound + math.log(bound + 1)) / case["tuning"]
    n = np.zeros((e, arms))
    x = np.zeros((e, arms))
    rules = ("view", "unpooled")
    crossed = {r: np.zeros((e, k), dtype=bool) for r in rules}
    for look in range(looks):
        chunk = (look + 1) * case["visitors"] // looks - look * case["visitors"] // looks
        new = rng.multinomial(chunk, weights, size=e)
        n += new
        x += rng.binomial(new.astype(np.int64), case["rate"])
        n0, x0 = n[:, 0], x[:, 0]
        for t in range(1, arms):
            n1, x1 = n[:, t], x[:, t]
            with np.errstate(divide="ignore", invalid="ignore"):
                testable = (
                    (0 < x1) & (x1 < n1) & (0 < x0) & (x0 < n0)
                    & (np.minimum(n1, n0) >= min_visitors)
                    & (x1 + x0 >= min_conversions)
                    & (n1 + n0 - x1 - x0 >= min_conversions)
                )
                p1, p0 = x1 / n1, x0 / n0
                se = np.sqrt(p1 * (1 - p1) / n1 + p0 * (1 - p0) / n0)
                se_null = pooled_se(x1, n1, x0, n0)
                for rule, s in (("view", np.maximum(se, se_null)), ("unpooled", se)):
                    p = k * mixture_p((p1 - p0) / s, (n1 + n0) * rho2)
                    crossed[rule][:, t - 1] |= testable & (p < ALPHA)
    return {
        rule: {"comparisons": float(c.mean()), "experiments": float(c.any(axis=1).mean())}
        for rule, c in crossed.items()
    }


def main():
    request = json.load(sys.stdin)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        answer = {
            "pairs": [pair(c) for c in request.get("pairs", [])],
            "families": [family(f) for f in request.get("families", [])],
            "welch": [welch(c) for c in request.get("welch", [])],
            "srm": [srm(c) for c in request.get("srm", [])],
            "srm_sequential": [srm_sequential(c) for c in request.get("srm_sequential", [])],
            "metrics": [metrics(c) for c in request.get("metrics", [])],
            "a_a_looks": [a_a_looks(c) for c in request.get("a_a_looks", [])],
        }
    json.dump(answer, sys.stdout)


if __name__ == "__main__":
    main()
