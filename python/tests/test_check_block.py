"""``check_block_verifier`` on samplers written here in vLLM's layout:
correct ones pass at L = 1..4 and K = 1..3, five broken ones (each a bug
seen in engines' code) fail with the default settings and name a wrong
sequence; exact mode; ``audit_first_tokens`` on logs at V = 151936 from
the rows of data/; ``samples_needed``; ``python -m mdsd check-block``."""

import functools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mdsd
from mdsd import _mdsd
from mdsd.block_check import PIT_ORDERS
import block_samplers as samplers

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

# The checks of correct samplers below (8 single-path, 4 multi-path, one
# that writes over its inputs) are a family of tests of true hypotheses:
# each at level 0.01 / 13, so that the family raises a false alarm with
# probability at most 0.01 (Bonferroni), not about 0.12. The broken
# samplers fail at the default level, 0.01.
CORRECT_CHECKS = 13
CORRECT_LEVEL = 0.01 / CORRECT_CHECKS


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
@pytest.mark.parametrize("name", ["token_sd", "block_verification"])
def test_correct_samplers_pass(name, depth):
    report = mdsd.check_block_verifier(getattr(samplers, name), depth, samples=50_000,
                                       level=CORRECT_LEVEL)
    assert report.lossless is True, report
    assert report.control_detected
    low, high = report.interval_99
    # The sampled E[tau] against the exact one of the same method.
    exact = report.reference["token" if name == "token_sd" else "bv"]
    assert low <= exact <= high, report
    assert report.expected_accepted <= report.reference["optimum"] + (high - low)


@pytest.mark.parametrize("paths,depth", [(1, 3), (2, 1), (2, 3), (3, 2)])
def test_a_multi_path_sampler_passes(paths, depth):
    report = mdsd.check_block_verifier(samplers.specinfer_paths, depth, paths=paths,
                                       samples=20_000, level=CORRECT_LEVEL)
    assert report.lossless is True, report
    # K paths can do better than one: the optimum (LP or bound) is at least bv.
    assert report.reference["optimum"] >= report.reference["bv"] - 1e-12


@pytest.mark.parametrize("name,paths,depth", [
    ("bv_stop_from_current_row", 1, 4),
    ("bv_tokenwise_residual", 1, 4),
    ("sd_unnormalised_residual", 1, 4),
    ("sd_bonus_from_last_row", 1, 4),
    ("tree_greedy", 2, 3),
])
def test_broken_samplers_fail_with_the_defaults(name, paths, depth):
    report = mdsd.check_block_verifier(getattr(samplers, name), depth, paths=paths)
    assert report.lossless is False, report
    assert report.reasons
    # The report names a wrong sequence: the worst one is off by many
    # standard deviations.
    worst = report.worst[0]
    assert abs(worst["observed"] - worst["expected"]) > 4 * np.sqrt(max(worst["expected"], 1))
    assert "worst sequence" in repr(report)


def test_a_sampler_may_write_over_its_inputs():
    """The arrays are buffers written again for every call: a sampler
    that overwrites its inputs after use (as engines' in-place kernels
    do) is still given the right laws on the next call."""
    def scribbles(target, draft, ids, rng):
        out = samplers.block_verification(target, draft, ids, rng)
        target[:] = 1.0
        draft[:] = 0.0
        ids[:] = 0
        return out
    report = mdsd.check_block_verifier(scribbles, 3, samples=20_000, batch_size=1000,
                                       level=CORRECT_LEVEL)
    assert report.lossless is True, report
    low, high = report.interval_99
    assert low <= report.reference["bv"] <= high, report


def test_the_wrong_row_bug_hides_on_context_free_laws():
    """Block verification reading S_d from x_d's row: the same row at every
    position makes it right, which is why only context-dependent laws
    catch it."""
    report = mdsd.check_block_verifier(samplers.bv_stop_from_current_row, 4, laws="iid")
    assert report.lossless is True, report


def test_accepting_more_than_the_optimum_is_proof_of_loss():
    def accept_everything(target, draft, ids, rng):
        out = np.concatenate([ids, np.zeros((len(ids), 1), dtype=np.int64)], axis=1)
        cumulative = np.cumsum(target[:, -1], axis=1)
        out[:, -1] = (cumulative < rng.random(len(ids))[:, None]).sum(axis=1)
        return np.minimum(out, target.shape[-1] - 1)
    report = mdsd.check_block_verifier(accept_everything, 2, samples=20_000)
    assert report.lossless is False
    assert any("proof of loss" in reason for reason in report.reasons), report.reasons


def test_a_sampler_that_never_accepts_is_degenerate():
    def reject_all(target, draft, ids, rng):
        out = np.full((len(ids), ids.shape[1] + 1), -1, dtype=np.int64)
        cumulative = np.cumsum(target[:, 0], axis=1)
        u = rng.random(len(ids)) * cumulative[:, -1]
        out[:, 0] = (cumulative < u[:, None]).sum(axis=1)
        return out
    report = mdsd.check_block_verifier(reject_all, 3, samples=20_000)
    assert report.lossless is True and report.degenerate
    assert "degenerate" in repr(report)


def test_a_sampler_that_ignores_its_target_is_inconclusive():
    """The negative control: a sampler holding its own copy of the target
    (an engine that reads its model, not the arrays) passes against p, but
    so would a moved target: the report says the pass means nothing."""
    held = {}

    def own_target(target, draft, ids, rng):
        # laws="iid": the same law at every position; the first call's.
        law = held.setdefault("law", target[0, 0].copy())
        out = np.full((len(ids), ids.shape[1] + 1), -1, dtype=np.int64)
        cumulative = np.cumsum(law)
        out[:, 0] = (cumulative[None, :] < rng.random(len(ids))[:, None]).sum(axis=1)
        return np.minimum(out, len(law) - 1) * (out >= 0) - (out < 0)
    report = mdsd.check_block_verifier(own_target, 2, laws="iid", samples=50_000)
    assert report.lossless is None and report.control_detected is False, report
    assert any("negative control" in reason for reason in report.reasons)


def test_outputs_that_break_the_layout_are_named():
    def wrong_shape(target, draft, ids, rng):
        return np.zeros((len(ids), 2), dtype=np.int64)
    with pytest.raises(mdsd.MdsdError, match=r"expected \(\d+, 4\)"):
        mdsd.check_block_verifier(wrong_shape, 3, samples=100)

    def outside(target, draft, ids, rng):
        out = np.full((len(ids), ids.shape[1] + 1), -1, dtype=np.int64)
        out[:, 0] = 99
        return out
    with pytest.raises(mdsd.MdsdError, match="token 99 .* outside the vocabulary"):
        mdsd.check_block_verifier(outside, 3, samples=100)

    def undrafted(target, draft, ids, rng):
        out = np.full((len(ids), ids.shape[1] + 1), -1, dtype=np.int64)
        out[:, 0] = (ids[:, 0] + 1) % target.shape[-1]
        out[:, 1] = 0
        return out
    with pytest.raises(mdsd.MdsdError, match="not a drafted prefix"):
        mdsd.check_block_verifier(undrafted, 3, samples=100)

    def floats(target, draft, ids, rng):
        return np.full((len(ids), ids.shape[1] + 1), 0.5)
    with pytest.raises(mdsd.MdsdError, match="token ids"):
        mdsd.check_block_verifier(floats, 3, samples=100)


def test_arguments_are_checked():
    with pytest.raises(TypeError, match="expected a function"):
        mdsd.check_block_verifier(3, 2)
    with pytest.raises(mdsd.MdsdError, match="depth=0"):
        mdsd.check_block_verifier(samplers.token_sd, 0)
    with pytest.raises(mdsd.MdsdError, match="laws='sideways'"):
        mdsd.check_block_verifier(samplers.token_sd, 2, laws="sideways")
    with pytest.raises(mdsd.MdsdError, match="V\\^\\(L\\+1\\)"):
        mdsd.check_block_verifier(samplers.token_sd, 12, vocab_size=6)
    with pytest.raises(mdsd.MdsdError, match="framework='jax'"):
        mdsd.check_block_verifier(samplers.token_sd, 2, framework="jax")
    with pytest.raises(mdsd.MdsdError, match="level=2"):
        mdsd.check_block_verifier(samplers.token_sd, 2, level=2)
    # A batch whose arrays would not fit is refused before any work.
    with pytest.raises(mdsd.MdsdError, match="take 67.1 GiB, above 1 GiB: a smaller batch_size"):
        mdsd.check_block_verifier(samplers.token_sd, 1, vocab_size=1000, paths=3,
                                  batch_size=10 ** 6, samples=10 ** 6)


def _token_sd_law(target, draft, ids):
    """Token-by-token SD's output law per block, enumerated."""
    laws = []
    for t, q, x in zip(target, draft, ids):
        law, reach = {}, 1.0
        for j, token in enumerate(x):
            accept = min(1.0, t[j, token] / q[j, token])
            residual = np.maximum(t[j] - q[j], 0.0)
            if accept < 1.0:
                residual /= residual.sum()
                for y in np.flatnonzero(residual):
                    law[tuple(x[:j]) + (int(y),)] = reach * (1 - accept) * residual[y]
            reach *= accept
        for y in np.flatnonzero(t[-1]):
            law[tuple(x) + (int(y),)] = reach * t[-1, y]
        laws.append(law)
    return laws


def test_exact_mode_checks_the_output_law():
    report = mdsd.check_block_verifier(_token_sd_law, 2, vocab_size=4, exact=True)
    assert report.lossless is True and report.max_law_error < 1e-12
    assert abs(report.expected_accepted - report.reference["token"]) < 1e-12

    def lossy(target, draft, ids):
        laws = []
        for t, x in zip(target, ids):
            # Accept the whole path, then a token from p: E[tau] = L.
            laws.append({tuple(x) + (int(y),): float(t[-1, y]) for y in np.flatnonzero(t[-1])})
        return laws
    report = mdsd.check_block_verifier(lossy, 2, vocab_size=4, exact=True)
    assert report.lossless is False and report.max_law_error > 1e-3


def test_markov_laws_and_callback_models_are_laws_too():
    laws = mdsd.MarkovLaws(4, 1, 3)
    report = mdsd.check_block_verifier(samplers.block_verification, 3, laws=laws,
                                       samples=40_000)
    assert report.lossless is True and report.laws == "MarkovLaws"
    model = mdsd.CallbackModel(laws.target, laws.draft, 4, logits=False)
    again = mdsd.check_block_verifier(samplers.block_verification, 3, laws=model,
                                      samples=40_000)
    assert again.reference == report.reference


def test_samples_needed_is_what_the_report_detects():
    n = mdsd.samples_needed(0.02, 6, 3)
    report = mdsd.check_block_verifier(samplers.token_sd, 3, samples=n, control=False)
    # Pooling rare sequences lowers the degrees of freedom: at least as
    # sensitive as promised.
    assert report.detectable_tv <= 0.02 * 1.01
    assert mdsd.samples_needed(0.01, 6, 3) > n
    with pytest.raises(mdsd.MdsdError, match="tv=0"):
        mdsd.samples_needed(0, 6, 3)


def test_torch_framework():
    torch = pytest.importorskip("torch", reason="torch is not installed")

    def token_sd_torch(target, draft, ids, generator):
        assert isinstance(target, torch.Tensor)
        out = samplers.token_sd(target.numpy(), draft.numpy(), ids.numpy(),
                                np.random.default_rng(int(torch.randint(2**31, (1,),
                                                                         generator=generator))))
        return torch.from_numpy(out)
    report = mdsd.check_block_verifier(token_sd_torch, 2, samples=20_000, framework="torch")
    assert report.lossless is True


def _hugging_face_wrapper():
    pytest.importorskip("torch", reason="torch is not installed")
    pytest.importorskip("transformers", reason="transformers is not installed")
    sys.path.insert(0, str(ROOT / "docs"))
    import check_block_hf
    return check_block_hf


def test_hugging_face_speculative_sampling_passes():
    """transformers' ``_speculative_sampling`` (token by token, the last
    row the bonus) wrapped as docs/check-block.md shows."""
    hf = _hugging_face_wrapper()
    report = mdsd.check_block_verifier(hf.hf_speculative_sampling, 3, samples=20_000,
                                       framework="torch")
    assert report.lossless is True, report


def test_hugging_face_ensemble_mode_fails():
    """transformers 5's ``assistant_ensemble_weight`` verifies against
    w p + (1 - w) q, biased by design (its docstring): the checker says so
    and names a wrong sequence."""
    hf = _hugging_face_wrapper()
    if "assistant_ensemble_weight" not in hf._PARAMETERS:
        pytest.skip("this transformers has no ensemble mode")
    ensemble = functools.partial(hf.hf_speculative_sampling, assistant_ensemble_weight=0.5)
    report = mdsd.check_block_verifier(ensemble, 3, samples=20_000, framework="torch")
    assert report.lossless is False, report
    assert report.p_value < 1e-6 and report.worst, report


def test_the_command_line(tmp_path):
    run = lambda *args: subprocess.run([sys.executable, "-m", "mdsd", "check-block", *args],
                                       cwd=HERE, capture_output=True, text=True)
    ok = run("block_samplers:token_sd", "--depth", "2", "--samples", "20000")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("verdict           lossless")
    bad = run("block_samplers:sd_bonus_from_last_row", "--depth", "3")
    assert bad.returncode == 1 and "NOT lossless" in bad.stdout
    for args, words in [(("block_samplers:missing", "--depth", "2"), "has no 'missing'"),
                        (("nomodule:f", "--depth", "2"), "cannot import"),
                        (("block_samplers:token_sd", "--depth", "0"), "depth=0"),
                        (("block_samplers:token_sd",), "--depth")]:
        done = run(*args)
        assert done.returncode == 2, (args, done.stdout)
        assert len(done.stderr.strip().splitlines()) == 1 and words in done.stderr, done.stderr


# The audit of engine logs at full vocabulary.

TEMPERATURES = (0.8, 1.0, 1.25)


@pytest.fixture(scope="module")
def real_laws():
    data = np.load(ROOT / "data" / "qwen-coder-dense-8rows.npz")
    def tempered(x, t):
        y = np.power(x.astype(np.float64), 1.0 / t)
        return y / y.sum(axis=-1, keepdims=True)
    p = np.concatenate([tempered(data["p"], t) for t in TEMPERATURES])
    q = np.concatenate([tempered(data["q"], t) for t in TEMPERATURES])
    return p, q, np.cumsum(q, axis=1)


class _Log:
    """Target rows of a log, gathered a slice at a time from a few laws
    (the audit reads logs this way: a long one need not fit in memory)."""

    def __init__(self, laws, index):
        self.laws, self.index = laws, index
        self.shape = index.shape + (laws.shape[1],)

    def __getitem__(self, rows):
        return self.laws[self.index[rows]]


def _engine_log(sampler, real_laws, blocks, depth=2, paths=1, seed=0):
    """Blocks on real rows: position j of block i takes law (i mod 24) of
    the other text every other position (so that rows differ by
    position); each sampler's outputs with the rows it saw."""
    p, q, q_cumulative = real_laws
    rng = np.random.default_rng(seed)
    index, outputs = [], []
    for start in range(0, blocks, 16):
        i = np.arange(start, min(blocks, start + 16))
        law = (i % 3) * 8 + i % 8
        pos = np.stack([(law // 8) * 8 + (law % 8 + 4 * j) % 8 for j in range(depth + 1)], 1)
        target, draft = p[pos], q[pos[:, :depth]]

        def draw():
            u = rng.random((len(i), depth))
            return np.array([[np.searchsorted(q_cumulative[pos[r, j]], u[r, j])
                              for j in range(depth)] for r in range(len(i))])
        if paths == 1:
            out = sampler(target, draft, draw(), rng)
        else:
            ids = np.stack([draw() for _ in range(paths)], axis=1)
            out = sampler(np.repeat(target[:, None], paths, 1),
                          np.repeat(draft[:, None], paths, 1), ids, rng)
        index.append(pos)
        outputs.append(out)
    return _Log(p, np.concatenate(index)), np.concatenate(outputs)


# Block verification with a token-wise residual is not here: on these rows
# its loss is below what the log detects (the next test shows it);
# check_block_verifier's context-dependent laws catch it.
@pytest.mark.parametrize("name,paths,lossless,blocks", [
    ("token_sd", 1, True, 1200), ("block_verification", 1, True, 1200),
    ("bv_stop_from_current_row", 1, False, 2000), ("sd_unnormalised_residual", 1, False, 1200),
    ("sd_bonus_from_last_row", 1, False, 1200), ("tree_greedy", 2, False, 1200),
])
def test_audit_of_logs_at_full_vocabulary(real_laws, name, paths, lossless, blocks):
    log, outputs = _engine_log(getattr(samplers, name), real_laws, blocks, paths=paths)
    audit = mdsd.audit_first_tokens(log, outputs)
    assert audit.lossless is lossless, audit
    assert audit.tokens > blocks
    assert set(audit.p_values) == set(PIT_ORDERS)
    assert audit.p_value == pytest.approx(min(1.0, 2 * min(audit.p_values.values())))


def test_the_token_wise_residual_is_below_what_a_log_detects(real_laws):
    """Block verification with a token-wise residual passes the audit of
    these rows, and that is no miss: on the same random numbers it emits
    the same block as block verification in all but a few blocks, so the
    total variation between the two output laws (and between the laws of
    their binned transforms, functions of the outputs) is at most the
    chance that they differ (a coupling), whose 99% upper bound is below
    the smallest loss the log detects."""
    blocks = 2000
    log, right = _engine_log(samplers.block_verification, real_laws, blocks)
    _, wrong = _engine_log(samplers.bv_tokenwise_residual, real_laws, blocks)
    differ = int((right != wrong).any(axis=1).sum())
    assert differ > 0, "the two samplers must differ somewhere on these rows"
    _, upper = _mdsd.wilson_interval(differ, blocks)
    audit = mdsd.audit_first_tokens(log, wrong)
    assert audit.lossless is True, audit
    assert upper < audit.detectable_tv, (differ, upper, audit)


def test_audit_of_first_tokens_alone(real_laws):
    """First tokens only: lossless logs pass and grossly wrong ones fail;
    block verification with a token-wise residual is wrong only past the
    first position, where no first-token audit can look."""
    for name, lossless in [("token_sd", True), ("sd_unnormalised_residual", False),
                           ("bv_tokenwise_residual", True)]:
        log, outputs = _engine_log(getattr(samplers, name), real_laws, 1200)
        first = _Log(log.laws, log.index[:, 0])
        audit = mdsd.audit_first_tokens(first, outputs[:, 0])
        assert audit.lossless is lossless, (name, audit)
    with pytest.raises(mdsd.MdsdError, match="one emitted token per step"):
        mdsd.audit_first_tokens(np.full((3, 4), 0.25), np.zeros((3, 2), dtype=np.int64))
    with pytest.raises(mdsd.MdsdError, match="outside the vocabulary"):
        mdsd.audit_first_tokens(np.full((3, 4), 0.25), np.array([0, 1, 7]))
    few = mdsd.audit_first_tokens(np.full((3, 4), 0.25), np.array([0, 1, 2]))
    assert few.lossless is None


def test_block_efficiency_takes_your_own_sampler():
    """Your sampler beside the built-in methods on the same drafted trees:
    block verification written here and mdsd's agree within the
    intervals; a sampler's errors are named."""
    laws = mdsd.MarkovLaws(4, 1, 9)
    model = mdsd.CallbackModel(laws.target, laws.draft, 4, logits=False)
    report = mdsd.block_efficiency(model, [[]], 3, 1,
                                   ["bv", "token", samplers.block_verification, samplers.token_sd],
                                   samples=20_000, batch=500)
    exact = mdsd.block_efficiency(model, [[]], 3, 1, ["bv", "token"], samples=None)
    for mine, theirs in [("block_verification", "bv"), ("token_sd", "token")]:
        low, high = report.methods[mine].interval_99
        assert low <= exact.methods[theirs].expected_accepted <= high, (mine, report)
        assert report.methods[mine].first_token_p_value >= 0.01
    multi = mdsd.block_efficiency(model, [[]], 2, 2, ["specinfer", samplers.specinfer_paths],
                                  samples=5_000, batch=500)
    assert abs(multi.methods["specinfer_paths"].expected_accepted
               - multi.methods["specinfer"].expected_accepted) < 0.05

    def crashes(target, draft, ids, rng):
        raise ValueError("boom")
    with pytest.raises(mdsd.MdsdError, match="the sampler crashes: ValueError: boom") as raised:
        mdsd.block_efficiency(model, [[]], 2, 1, [crashes], samples=10)
    assert isinstance(raised.value.__cause__, ValueError)

    def undrafted(target, draft, ids, rng):
        out = np.full((len(ids), ids.shape[1] + 1), -1, dtype=np.int64)
        out[:, :2] = (ids[:, :2] + 1) % target.shape[-1]
        return out
    with pytest.raises(mdsd.MdsdError, match="not a drafted prefix"):
        mdsd.block_efficiency(model, [[]], 2, 1, [undrafted], samples=10)

    # A token after the padding is refused, not dropped: both checkers
    # read rows the same way.
    def token_after_padding(target, draft, ids, rng):
        out = samplers.token_sd(target, draft, ids, rng)
        out[:, 1], out[:, 2] = -1, 0
        return out
    for check in (lambda f: mdsd.block_efficiency(model, [[]], 2, 1, [f], samples=50),
                  lambda f: mdsd.check_block_verifier(f, 2, samples=100)):
        with pytest.raises(mdsd.MdsdError, match=r"row \d+: the sampler token_after_padding: "
                           r"output row \[\d+, -1, \d+\]: tokens, then -1 padding"):
            check(token_after_padding)
    with pytest.raises(mdsd.MdsdError, match="sampled mode"):
        mdsd.block_efficiency(model, [[]], 2, 1, [samplers.token_sd], samples=None)
