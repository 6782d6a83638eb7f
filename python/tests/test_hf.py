"""The Hugging Face adapter on tiny randomly initialised models built from a
config (no download): its logits are the model's, the shared-prefix cache
changes nothing, the transforms are mdsd's, and block efficiency and
speculative decoding run on a pair of them with the target's law kept.
Skipped without torch and transformers."""

import numpy as np
import pytest

import mdsd

torch = pytest.importorskip("torch", reason="torch is not installed (the adapter needs it)")
transformers = pytest.importorskip("transformers", reason="transformers is not installed")
import mdsd.hf  # noqa: E402

# The adapter names the key-value cache as the installed transformers
# does: a deprecated name (past_key_values from transformers 5 on) fails.
pytestmark = pytest.mark.filterwarnings("error:.*past_key_values.*:FutureWarning")

VOCAB = 12


def tiny_model(seed):
    torch.manual_seed(seed)
    # A wide initialisation: laws far from uniform, target and draft far
    # from each other, so that acceptance is neither 0 nor 1.
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=16, n_layer=2,
                                     n_head=2, bos_token_id=0, eos_token_id=0,
                                     initializer_range=0.5)
    return transformers.GPT2LMHeadModel(config).eval()


def direct_logits(model, prefix):
    with torch.no_grad():
        out = model(input_ids=torch.tensor([prefix])).logits[0, -1]
    return out.double().numpy()


def test_logits_are_the_models_with_or_without_the_shared_prefix():
    model = tiny_model(0)
    prefixes = [[1, 2, 3], [1, 2, 3, 4], [1, 2, 5, 6, 7], [1, 2]]
    shared = mdsd.hf.causal_lm_fn(model)(prefixes)
    whole = mdsd.hf.causal_lm_fn(model, share_prefix=False)(prefixes)
    for row, prefix in zip(shared, prefixes):
        np.testing.assert_allclose(row, direct_logits(model, prefix), atol=1e-4)
    np.testing.assert_allclose(shared, whole, atol=1e-4)
    with pytest.raises(ValueError, match="empty prefix"):
        mdsd.hf.causal_lm_fn(model)([[]])


def test_the_shared_cache_kept_between_calls_changes_nothing():
    """Calls as a decoding loop makes them: each one's shared tokens extend
    the last's (the kept cache is extended), then a call that does not
    extend them (computed afresh)."""
    model = tiny_model(4)
    fn = mdsd.hf.causal_lm_fn(model)
    calls = [
        [[1, 2, 3], [1, 2, 3, 4]],
        [[1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 7]],
        [[1, 2, 3, 4, 5, 6, 8]],
        [[9, 2, 3], [9, 2, 4]],
        [[1, 2, 3, 4, 5, 6, 8, 10], [1, 2, 3, 4, 5, 6, 8, 11]],
    ]
    for prefixes in calls:
        got = fn(prefixes)
        for row, prefix in zip(got, prefixes):
            np.testing.assert_allclose(row, direct_logits(model, prefix), atol=1e-4)


def test_transforms_are_mdsds():
    model = tiny_model(1)
    prefix = [[3, 1]]
    raw = direct_logits(model, prefix[0])
    for settings in [dict(temperature=0.7), dict(top_k=4), dict(top_p=0.6),
                     dict(temperature=1.3, top_k=6, top_p=0.8)]:
        logits = mdsd.hf.causal_lm_fn(model, **settings)(prefix)[0]
        law = np.exp(logits - logits.max())
        law /= law.sum()
        expected = mdsd.Verifier("nss", raw, np.full(VOCAB, 1.0 / VOCAB), 1, logits=True,
                                 **settings).conditional([0])
        np.testing.assert_allclose(law, expected, atol=1e-5, err_msg=str(settings))
    argmax = mdsd.hf.causal_lm_fn(model, temperature=0)(prefix)[0]
    assert np.isfinite(argmax).sum() == 1 and np.argmax(argmax) == np.argmax(raw)


def test_block_efficiency_on_a_tiny_pair():
    target, draft = tiny_model(2), tiny_model(3)
    model = mdsd.CallbackModel(mdsd.hf.causal_lm_fn(target), mdsd.hf.causal_lm_fn(draft), VOCAB)
    report = mdsd.block_efficiency(model, [[1, 2]], depth=3, paths=2, samples=400, batch=100)
    assert report.rounds == 4
    assert report.target_calls <= report.rounds
    assert report.draft_calls <= report.rounds * 4
    for figures in report.methods.values():
        assert 0.0 <= figures.expected_accepted <= 3.0
        assert figures.first_token_p_value >= 0.01, figures


@pytest.mark.parametrize("verifier", ["specinfer", "kseq", "khisti", "optimal-convex"])
def test_decoding_on_a_tiny_pair_keeps_the_target_law(verifier):
    target, draft = tiny_model(2), tiny_model(3)
    model = mdsd.CallbackModel(mdsd.hf.causal_lm_fn(target), mdsd.hf.causal_lm_fn(draft), VOCAB)
    prompt = [4, 5]
    runs = 1500
    first = np.array([mdsd.speculative_decode(model, prompt, 1, n=2, verifier=verifier,
                                              seed=s)["tokens"][0] for s in range(runs)])
    logits = direct_logits(target, prompt)
    law = np.exp(logits - logits.max())
    fit = mdsd._mdsd.goodness_of_fit(np.bincount(first, minlength=VOCAB), law / law.sum(), 0.01)
    assert fit["p_value"] >= 0.01, fit
    # Tokens per target call against the prediction from the models' laws,
    # within the 99% interval of the mean of the steps' acceptances.
    steps = accepted = expected = 0.0
    for seed in range(30):
        run = mdsd.speculative_decode(model, prompt, 40, n=2, verifier=verifier, seed=seed)
        steps += run["steps"]
        accepted += run["accepted"]
        expected += (run["predicted_tokens_per_target_call"] - 1.0) * run["steps"]
    predicted = expected / steps
    assert 0.05 < predicted < 0.95, predicted
    measured = accepted / steps
    half_width = 2.5758 * np.sqrt(0.25 / steps)
    assert abs(measured - predicted) <= half_width, (measured, predicted, half_width)
