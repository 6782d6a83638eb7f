"""Objects shared by threads: 8 threads on one CallbackModel, one
Verifier, one DataFile give what one thread gives, and nothing waits for
ever. Each test runs its threads with a deadline, so a deadlock fails the
test rather than hanging the suite."""

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import mdsd

ROOT = Path(__file__).resolve().parents[2]
THREADS = 8
#: Seconds the threads of one test may take together before it counts as
#: a deadlock (each test's work takes a fraction of a second alone).
DEADLINE_S = 120


def in_threads(work, arguments):
    """``work(a)`` for each argument, on THREADS threads at once."""
    with ThreadPoolExecutor(THREADS) as pool:
        futures = [pool.submit(work, a) for a in arguments]
        return [f.result(timeout=DEADLINE_S) for f in futures]


def markov_model(cache_size=4096):
    laws = mdsd.MarkovLaws(5, 1, 7)
    return mdsd.CallbackModel(laws.target, laws.draft, 5, logits=False, cache_size=cache_size)


@pytest.mark.parametrize("cache_size", [0, 4096])
def test_one_callback_model_in_eight_threads(cache_size):
    def blocks(model, seed):
        report = mdsd.block_efficiency(model, [[1], [2, 3]], depth=3, paths=2, samples=300,
                                       seed=seed, batch=16)
        return {name: m.expected_accepted for name, m in report.methods.items()}

    def laws(model, seed):
        prefixes = [[seed % 5], [1, seed % 5]]
        return model.laws("target", prefixes), model.laws("draft", prefixes)

    alone_model = markov_model(cache_size)
    alone = [blocks(alone_model, s) for s in range(THREADS)]
    alone_laws = [laws(alone_model, s) for s in range(THREADS)]
    model = markov_model(cache_size)
    # Blocks and laws interleaved, while another thread reads the counts.
    reading = threading.Event()

    def read_counts():
        while not reading.is_set():
            assert model.target_calls >= 0 and model.draft_calls >= 0

    reader = threading.Thread(target=read_counts)
    reader.start()
    try:
        together = in_threads(lambda seed: blocks(model, seed), range(THREADS))
        together_laws = in_threads(lambda seed: laws(model, seed), range(THREADS))
    finally:
        reading.set()
        reader.join(DEADLINE_S)
    assert together == alone
    for (t, d), (t_alone, d_alone) in zip(together_laws, alone_laws):
        assert np.array_equal(t, t_alone) and np.array_equal(d, d_alone)


def test_a_function_that_calls_its_own_model_is_refused():
    laws = mdsd.MarkovLaws(5, 1, 7)

    def target(prefixes):
        model.laws("draft", prefixes)
        return laws.target(prefixes)

    model = mdsd.CallbackModel(target, laws.draft, 5, logits=False)
    for call in (lambda: model.laws("target", [[1]]),
                 lambda: mdsd.block_efficiency(model, [[1]], depth=2, paths=2, samples=10)):
        with pytest.raises(mdsd.MdsdError, match="called back into the model"):
            in_threads(lambda _: call(), [0])[0]


def test_one_verifier_in_eight_threads():
    rng = np.random.default_rng(3)
    p, q = rng.dirichlet(np.ones(50)), rng.dirichlet(np.ones(50))
    for name in ("specinfer", "khisti", "optimal-convex"):
        verifier = mdsd.Verifier(name, p, q, 2)
        drafts = rng.integers(0, 50, size=(20_000, 2))

        def sample(seed):
            return (verifier.sample_batch(drafts, seed=seed),
                    verifier.conditional([int(seed) % 50, 7]), verifier.acceptance)

        alone = [sample(s) for s in range(THREADS)]
        together = in_threads(sample, range(THREADS))
        for (tokens, law, acceptance), (tokens1, law1, acceptance1) in zip(together, alone):
            assert np.array_equal(tokens, tokens1) and np.array_equal(law, law1)
            assert acceptance == acceptance1


def test_one_data_file_in_eight_threads():
    # The native reader mdsd.evaluate_file's windows come from.
    data = mdsd._mdsd.DataFile(str(ROOT / "data" / "qwen-coder-dense-8rows.npz"))

    def read(start):
        p, q = data.read(start % data.rows, data.rows)
        return p, q

    alone = [read(s) for s in range(THREADS)]
    together = in_threads(read, range(THREADS))
    for (p, q), (p1, q1) in zip(together, alone):
        assert np.array_equal(p, p1) and np.array_equal(q, q1)
    path = ROOT / "data" / "qwen-coder-dense-8rows.npz"

    def evaluated(seed):
        e = mdsd.evaluate_file(path, n=[2], schemes=["iid"], verifiers=["khisti"], samples=2000,
                               seed=seed, rows=2)
        return e.alpha_star["iid"], e.acceptance["khisti"]

    alone = [evaluated(s) for s in range(4)]
    together = in_threads(evaluated, range(4))
    for (a, k), (a1, k1) in zip(together, alone):
        assert np.array_equal(a, a1) and np.array_equal(k, k1)
