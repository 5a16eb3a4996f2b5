"""Greedy and beam search: beam 1 == greedy, beam >= greedy in probability, n-gram blocking, min_len,
repetition penalty and length-penalty formulas."""
from __future__ import annotations

import math

import pytest
import torch

from conftest import make_encoded, random_batch, tiny_transformer
from seq2seq_zoo.config import DecodeConfig
from seq2seq_zoo.data.batching import collate
from seq2seq_zoo.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from seq2seq_zoo.decode import (beam_search, block_ngrams, generate, greedy, length_penalty, penalise_repeats,
                                sequence_logprob)

V = 24


def ending_model(seed: int, eos_bias: float = 2.0):
    """A random tiny Transformer whose hypotheses end after a few tokens (EOS made likely), and that
    never proposes <pad>/<bos>."""
    m = tiny_transformer(vocab_size=V, seed=seed)
    with torch.no_grad():
        m.generator.bias[EOS_ID] += eos_bias
        m.generator.bias[PAD_ID] -= 50
        m.generator.bias[BOS_ID] -= 50
    return m


def batch4(seed=0):
    return random_batch(V, src_lens=[5, 8, 3, 6], tgt_lens=[1, 1, 1, 1], seed=seed)


@pytest.mark.parametrize("seed,eos", [(0, 3.0), (2, 4.0), (3, 4.0)])
@pytest.mark.parametrize("alpha,style", [(0.0, "none"), (1.0, "gnmt"), (0.6, "gnmt"), (1.0, "hf")])
def test_beam_size_one_equals_greedy(seed, eos, alpha, style):
    model = peaky_model(seed, 3.0, eos)
    batch = random_batch(V, [5, 8, 3, 6, 7, 4], [1] * 6, seed=seed)
    cfg = DecodeConfig(beam_size=1, length_penalty=alpha, length_penalty_style=style, max_len=15)
    g = greedy(model, batch, cfg)
    b = beam_search(model, batch, cfg)
    assert g == b
    assert len({len(x) for x in g}) > 1  # hypotheses of different lengths, some ended by <eos>


def peaky_model(seed: int, scale: float, eos_bias: float, vocab_size: int = V):
    """Untied output layer scaled up: peaked, context-dependent next-token distributions."""
    m = tiny_transformer(vocab_size=vocab_size, seed=seed, tie_embeddings=False)
    with torch.no_grad():
        m.generator.weight *= scale
        m.generator.bias[EOS_ID] += eos_bias
        m.generator.bias[PAD_ID] -= 50
        m.generator.bias[BOS_ID] -= 50
    return m


def objective(model, batch, seqs, max_len):
    """Beam search's objective, computed independently by teacher forcing: the summed log-prob of the
    tokens, plus <eos> for hypotheses that ended before max_len."""
    items = [make_encoded(batch.src[i, : int(batch.src_len[i])].tolist(), s) for i, s in enumerate(seqs)]
    tf = collate(items)
    with torch.no_grad():
        lp = model(tf).log_probs
    out = []
    for i, s in enumerate(seqs):
        n = len(s) + (1 if len(s) < max_len else 0)
        out.append(float(sum(lp[i, t, tf.tgt_out[i, t]] for t in range(n))))
    return out


# Beam search is not guaranteed to beat greedy on every input (the greedy prefix can be pruned), so
# these are fixed small models on which beam and greedy disagree for some examples.
@pytest.mark.parametrize("seed,scale,eos", [(1, 6.0, 0.0), (2, 6.0, 4.0), (4, 6.0, 2.0)])
def test_beam_finds_sequence_at_least_as_probable_as_greedy(seed, scale, eos):
    model = peaky_model(seed, scale, eos)
    batch = random_batch(V, [5, 8, 3, 6, 7, 4], [1] * 6, seed=seed)
    cfg = DecodeConfig(beam_size=4, length_penalty=0.0, length_penalty_style="none", max_len=30)
    g = greedy(model, batch, cfg)
    b, b_scores = beam_search(model, batch, cfg, return_scores=True)
    assert g != b  # otherwise the comparison says nothing
    lg, lb = objective(model, batch, g, 30), objective(model, batch, b, 30)
    assert all(x >= y - 1e-4 for x, y in zip(lb, lg)), (lb, lg)
    assert b_scores == pytest.approx(lb, abs=1e-3)  # the reported score is the returned sequence's
    finished = [i for i, x in enumerate(b) if len(x) < 30]
    with torch.no_grad():  # for finished hypotheses sequence_logprob (which adds <eos>) agrees
        sl = sequence_logprob(model, batch, b)
    assert [sl[i].item() for i in finished] == pytest.approx([lb[i] for i in finished], abs=1e-3)


def test_wide_beam_finds_the_exact_optimum():
    """Vocabulary 8, max_len 3: a beam wider than the number of prefixes is an exhaustive search."""
    import itertools
    model = peaky_model(7, 4.0, 1.0, vocab_size=8)
    batch = random_batch(8, [4, 6], [1, 1], seed=7)
    cfg = DecodeConfig(beam_size=600, length_penalty=0.0, length_penalty_style="none", max_len=3, min_len=0)
    got = beam_search(model, batch, cfg)
    words = [UNK_ID, 4, 5, 6, 7]  # <pad>/<bos> carry -50 and cannot win
    cands = [list(c) for n in range(4) for c in itertools.product(words, repeat=n)]
    for i in range(2):
        src_i = batch.src[i, : int(batch.src_len[i])].tolist()
        scores = objective(model, collate([make_encoded(src_i, [5])] * len(cands)), cands, 3)
        best = cands[max(range(len(cands)), key=scores.__getitem__)]
        assert got[i] == best


def test_sequence_logprob_equals_teacher_forced_sum():
    model = ending_model(0)
    batch = batch4(0)
    seqs = [[5, 6], [7], [8, 9, 10], []]
    items = [make_encoded(batch.src[i, : int(batch.src_len[i])].tolist(), s) for i, s in enumerate(seqs)]
    tf = collate(items)
    with torch.no_grad():
        lp = model(tf).log_probs
        expected = [float(sum(lp[i, t, tf.tgt_out[i, t]] for t in range(len(s) + 1))) for i, s in enumerate(seqs)]
        got = sequence_logprob(model, batch, seqs)
    assert got.tolist() == pytest.approx(expected, abs=1e-4)


def looping_model(seed=0, favourite=7):
    """A model that wants to say the same token forever (and never <eos>)."""
    m = tiny_transformer(vocab_size=V, seed=seed)
    with torch.no_grad():
        m.generator.bias[favourite] += 30
        m.generator.bias[EOS_ID] -= 30
        m.generator.bias[PAD_ID] -= 50
        m.generator.bias[BOS_ID] -= 50
    return m


def ngrams(seq, n):
    return [tuple(seq[i:i + n]) for i in range(len(seq) - n + 1)]


@pytest.mark.parametrize("method", ["greedy", "beam"])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_ngram_blocking_never_repeats(method, n):
    model = looping_model()
    batch = batch4(1)
    free = generate(model, batch, DecodeConfig(method=method, beam_size=3, max_len=12))
    assert all(x == [7] * 12 for x in free)  # without blocking: one token repeated
    out = generate(model, batch, DecodeConfig(method=method, beam_size=3, max_len=12, no_repeat_ngram=n))
    for x in out:
        assert len(x) == 12
        grams = ngrams(x, n)
        assert len(grams) == len(set(grams)), (n, x)


def test_block_ngrams_by_hand():
    lp = torch.zeros(2, 10)
    tokens = torch.tensor([[5, 6, 5, 8, 5], [4, 4, 4, 4, 9]])
    # bigrams: row 0 ends with 5; earlier 5 was followed by 6 and by 8 -> both blocked
    out = block_ngrams(lp, tokens, 2)
    assert torch.isinf(out[0]).nonzero().flatten().tolist() == [6, 8]
    # row 1 ends with 9, which never appeared before -> nothing blocked
    assert torch.isinf(out[1]).sum() == 0
    # trigrams: row 0 ends with (8, 5): never seen before -> nothing; (5, 6)/(6, 5)/(5, 8) seen
    out3 = block_ngrams(lp, torch.tensor([[5, 6, 5, 6]]), 3)
    assert torch.isinf(out3[0]).nonzero().flatten().tolist() == [5]  # 5 6 5 seen; last two are 5 6
    # unigrams: every generated token blocked
    out1 = block_ngrams(lp, tokens, 1)
    assert torch.isinf(out1[0]).nonzero().flatten().tolist() == [5, 6, 8]
    assert torch.equal(block_ngrams(lp, tokens, 0), lp)
    # fewer tokens than n: no complete n-gram yet, nothing to block (and no error)
    assert torch.equal(block_ngrams(lp, torch.tensor([[5], [6]]), 2), lp)
    assert torch.equal(block_ngrams(lp[:1], torch.tensor([[5, 6]]), 3), lp[:1])


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_min_len_respected(method):
    model = ending_model(0, eos_bias=30.0)  # wants to stop at once
    batch = batch4(2)
    out0 = generate(model, batch, DecodeConfig(method=method, beam_size=3, min_len=0, max_len=20))
    assert all(len(x) == 0 for x in out0)
    for k in (1, 4):
        out = generate(model, batch, DecodeConfig(method=method, beam_size=3, min_len=k, max_len=20))
        assert all(len(x) == k for x in out), out


def test_penalise_repeats_lowers_only_generated_tokens():
    """The ``logprob`` rule (the records made before the correctness fixes)."""
    torch.manual_seed(0)
    lp = -torch.rand(3, 12) - 0.1                       # negative log-probs
    tokens = torch.tensor([[4, 5, 4], [7, 7, 7], [0, 9, 11]])
    out = penalise_repeats(lp, tokens, 1.5, style="logprob")
    seen = [{4, 5}, {7}, {9, 11}]                       # <pad> (0) is never penalised
    for r in range(3):
        for c in range(12):
            if c in seen[r]:
                assert float(out[r, c]) == pytest.approx(1.5 * float(lp[r, c]))
                assert out[r, c] < lp[r, c]
            else:
                assert out[r, c] == lp[r, c]
    assert torch.equal(penalise_repeats(lp, tokens, 1.0), lp)


def test_repetition_penalty_in_greedy_changes_a_looping_output():
    model = tiny_transformer(vocab_size=V, seed=4)
    with torch.no_grad():
        model.generator.bias[7] += 3.0
        model.generator.bias[EOS_ID] -= 30
    batch = batch4(3)
    base = greedy(model, batch, DecodeConfig(max_len=10))
    pen = greedy(model, batch, DecodeConfig(max_len=10, repetition_penalty=50.0, repetition_penalty_style="logprob"))
    assert any(x.count(7) > 1 for x in base)
    # a huge penalty makes any already generated token lose against an unseen one (on log-probs; on the
    # logits, keskar's rule only takes a positive logit towards 0)
    for x in pen:
        assert len(x) == len(set(x)), x


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0, 2.0])
def test_length_penalty_formulas(alpha):
    L = torch.tensor([1, 2, 5, 17])
    gnmt = length_penalty(L, alpha, "gnmt")
    hf = length_penalty(L, alpha, "hf")
    none = length_penalty(L, alpha, "none")
    for i, n in enumerate([1, 2, 5, 17]):
        assert float(gnmt[i]) == pytest.approx(((5 + n) / 6) ** alpha, rel=1e-6)
        assert float(hf[i]) == pytest.approx(n ** alpha, rel=1e-6)
        assert float(none[i]) == 1.0
    with pytest.raises(ValueError):
        length_penalty(L, 1.0, "gmnt")


def test_length_penalty_changes_the_choice_between_a_short_and_a_long_hypothesis():
    """With scores -2 (length 1) and -3 (length 4): unnormalised prefers short; hf alpha=1 prefers long."""
    s = torch.tensor([-2.0, -3.0])
    L = torch.tensor([1, 4])
    assert int((s / length_penalty(L, 0.0, "none")).argmax()) == 0
    assert int((s / length_penalty(L, 1.0, "hf")).argmax()) == 1  # -2/1 < -3/4


def test_generate_restores_training_mode_and_extended_ids_are_fed_as_unk():
    model = ending_model(1).train()
    batch = batch4(4)
    generate(model, batch, DecodeConfig(method="greedy", max_len=5))
    assert model.training
    prev = torch.tensor([V + 2, 5])
    assert model.feed(prev).tolist() == [UNK_ID, 5]


def test_beam_batch_independence():
    """Each example's beam result is the same decoded alone or with others."""
    model = ending_model(2, eos_bias=1.0)
    batch = batch4(5)
    cfg = DecodeConfig(beam_size=3, length_penalty=0.6, max_len=20)
    together = beam_search(model, batch, cfg)
    for i in range(4):
        one = collate([make_encoded(batch.src[i, : int(batch.src_len[i])].tolist(), [5])])
        assert beam_search(model, one, cfg)[0] == together[i]



def flat_beam_reference(model, batch, cfg):
    """Beam search written the textbook way, one example at a time with Python lists: every step ranks
    all K * V continuations of the live hypotheses; the EOS ones among the first K go to the example's
    finished list, the first K others stay live; the example stops when it holds K finished hypotheses
    and no live one ranks above the worst of them (Hugging Face's rule). Returns the best finished
    hypothesis, its score, and every hypothesis that finished on the way (rank, tokens)."""
    from seq2seq_zoo.decode import _adjust
    K = cfg.beam_size
    lpen = lambda n: float(length_penalty(torch.tensor(n), cfg.length_penalty, cfg.length_penalty_style))  # noqa: E731
    outs, scores, every = [], [], []
    with torch.no_grad():
        for i in range(batch.src.size(0)):
            one = collate([make_encoded(batch.src[i, : int(batch.src_len[i])].tolist(), [5])])
            state = model.encode(one)
            live = [(0.0, [])]                          # (score, tokens)
            state = model.reorder(state, torch.zeros(1, dtype=torch.long))
            fin, seen = [], []
            for step in range(cfg.max_len):
                prev = torch.tensor([t[-1] if t else BOS_ID for _, t in live])
                lp, state = model.decode_step(state, prev)
                toks = torch.tensor([t for _, t in live], dtype=torch.long).view(len(live), step)
                lp = _adjust(lp.float(), toks, step, cfg)
                cands = sorted(((s + float(lp[r, v])) / lpen(step + 1), s + float(lp[r, v]), r, v)
                               for r, (s, _) in enumerate(live) for v in range(lp.size(1)))[::-1]
                cands = [c for c in cands if c[0] > float("-inf")]
                new_live, rows = [], []
                for pos, (rk, s, r, v) in enumerate(cands):
                    if v == EOS_ID:
                        if pos < K:
                            fin.append((rk, s, live[r][1]))
                            seen.append((rk, live[r][1]))
                    elif len(new_live) < K:
                        new_live.append((s, live[r][1] + [v]))
                        rows.append(r)
                    if len(new_live) == K and pos >= K:
                        break
                fin = sorted(fin, key=lambda f: f[0], reverse=True)[:K]
                live = new_live
                if not live:
                    break
                state = model.reorder(state, torch.tensor(rows))
                if len(fin) == K and fin[-1][0] >= live[0][0] / lpen(step + 1):
                    break
            else:
                fin = sorted(fin + [(s / lpen(cfg.max_len), s, t) for s, t in live], key=lambda f: f[0],
                             reverse=True)
            outs.append(fin[0][2])
            scores.append(fin[0][1])
            every.append(seen)
    return outs, scores, every


# (EOS biases chosen so that in every case some hypotheses end before max_len and others do not)
@pytest.mark.parametrize("seed,eos,K,alpha,style,ngram,min_len", [
    (1, 1.5, 4, 0.0, "none", 0, 0), (2, 1.0, 4, 0.6, "gnmt", 0, 2), (3, 1.5, 3, 1.0, "hf", 2, 0),
    (4, 0.5, 5, 1.2, "gnmt", 3, 3), (5, 2.5, 2, 0.6, "gnmt", 0, 0)])
def test_beam_search_equals_the_flat_reference(seed, eos, K, alpha, style, ngram, min_len):
    model = peaky_model(seed, 2.0, eos)
    batch = random_batch(V, [5, 8, 3, 6, 7, 4], [1] * 6, seed=seed)
    cfg = DecodeConfig(beam_size=K, length_penalty=alpha, length_penalty_style=style, max_len=12,
                       no_repeat_ngram=ngram, min_len=min_len)
    got, got_scores = beam_search(model, batch, cfg, return_scores=True)
    want, want_scores, finished = flat_beam_reference(model, batch, cfg)
    assert got == want
    assert got_scores == pytest.approx(want_scores, abs=1e-4)
    # the result is never worse than any hypothesis that finished during the search
    lpen = lambda n: float(length_penalty(torch.tensor(n), alpha, style))  # noqa: E731
    for i, seq in enumerate(got):
        n = len(seq) + (1 if len(seq) < cfg.max_len else 0)
        assert all(got_scores[i] / lpen(n) >= rk - 1e-4 for rk, _ in finished[i])
    assert any(finished)
    assert len({len(x) for x in got}) > 1  # some hypotheses finished early, so freezing was exercised


def test_packed_linear_weights_same_outputs_and_restored():
    from seq2seq_zoo.models.fast.kernels import packed_linear_weights
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(12, 40), torch.nn.ReLU(), torch.nn.Linear(40, 7))
    x = torch.randn(5, 3, 12)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        plain = net(x)
        with packed_linear_weights(net, rows=15):
            packed = net(x)
            patched = [m for m in net if "forward" in m.__dict__]
        after = net(x)
    assert packed.dtype == plain.dtype == torch.bfloat16 and packed.shape == (5, 3, 7)
    torch.testing.assert_close(packed.float(), plain.float(), rtol=1e-2, atol=1e-2)
    assert torch.equal(after, plain)
    assert all("forward" not in m.__dict__ for m in net)  # restored
    if patched:  # this torch build has the oneDNN ops: both linear layers were swapped
        assert len(patched) == 2
    with torch.autocast("cpu", dtype=torch.bfloat16), packed_linear_weights(net):  # grad on: a no-op
        assert all("forward" not in m.__dict__ for m in net)



@pytest.mark.parametrize("bf16", [False, True])
def test_packed_weights_are_kept_between_calls_and_packed_again_after_an_update(bf16):
    """The packed weights outlive the context (the next decoding of the same weights reuses them) and
    are made again when a parameter changes, by an optimizer step or by ``.data =``: the outputs then
    equal a fresh copy's. The cache sits outside the module, so a packed model still deep-copies."""
    import contextlib
    import copy
    from seq2seq_zoo.models.fast import kernels
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(12, 40), torch.nn.ReLU(), torch.nn.Linear(40, 7))
    x = torch.randn(5, 12)
    ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext

    def packed_run(m):
        with torch.no_grad(), ctx(), kernels.packed_linear_weights(m, rows=5):
            return m(x), any("forward" in a.__dict__ for a in m)

    def kept(m):
        return [e[1] for e in kernels._PACKED.get(m[0], {}).values()]

    out1, patched = packed_run(net)
    if not patched:
        pytest.skip("this torch build (or CPU) takes no packed weights in this precision")
    first = kept(net)
    assert len(first) == 1
    out2, _ = packed_run(net)
    assert len(kept(net)) == 1 and kept(net)[0] is first[0] and torch.equal(out1, out2)
    copy.deepcopy(net)

    def fresh_out():
        twin = torch.nn.Sequential(torch.nn.Linear(12, 40), torch.nn.ReLU(), torch.nn.Linear(40, 7))
        twin.load_state_dict(net.state_dict())
        return packed_run(twin)[0]

    opt = torch.optim.SGD(net.parameters(), lr=0.5)
    net(x).square().sum().backward()
    opt.step()
    out3, _ = packed_run(net)
    assert kept(net)[0] is not first[0] and not torch.equal(out3, out1)
    assert torch.equal(out3, fresh_out())
    net[0].weight.data = torch.randn(40, 12)
    out4, _ = packed_run(net)
    assert torch.equal(out4, fresh_out()) and not torch.equal(out4, out3)


def test_generate_under_bf16_autocast_matches_unpacked_decoding(monkeypatch):
    import contextlib
    from seq2seq_zoo import decode
    model = peaky_model(3, 4.0, 2.0)
    batch = random_batch(V, [5, 8, 3, 6], [1] * 4, seed=3)
    cfg = DecodeConfig(beam_size=3, length_penalty=0.6, max_len=12)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        packed = generate(model, batch, cfg)
        monkeypatch.setattr(decode, "packed_linear_weights", lambda m, rows=32: contextlib.nullcontext())
        unpacked = generate(model, batch, cfg)
    assert packed == unpacked


def test_decode_split_packs_the_weights_once_and_decodes_as_unpacked(monkeypatch):
    """A whole split is decoded with the weights packed once (not once per batch), and gives the same
    text as decoding without packing."""
    import contextlib

    from conftest import tiny_encoded
    from seq2seq_zoo import decode, evaluation
    from seq2seq_zoo.models.fast import kernels
    from seq2seq_zoo.utils import cpu_has_fast_bf16
    vocab, data = tiny_encoded(10)
    model = tiny_transformer(vocab_size=len(vocab), seed=4, max_src_len=64)
    cfg = DecodeConfig(beam_size=2, max_len=8, batch_size=4)   # 3 batches
    packs = []

    @contextlib.contextmanager
    def counting(m, rows=32):
        before = sum("forward" in x.__dict__ for x in m.modules())
        with kernels.packed_linear_weights(m, rows):
            if sum("forward" in x.__dict__ for x in m.modules()) > before:
                packs.append(rows)
            yield

    monkeypatch.setattr(evaluation, "packed_linear_weights", counting)
    monkeypatch.setattr(decode, "packed_linear_weights", counting)
    cpu = torch.device("cpu")
    packed = evaluation.decode_split(model, data, vocab, cfg, cpu, torch.bfloat16)
    assert packs == ([8] if cpu_has_fast_bf16() else [])    # batch 4 x beam 2 rows, once for the split
    plain = lambda m, rows=32: contextlib.nullcontext()  # noqa: E731
    monkeypatch.setattr(evaluation, "packed_linear_weights", plain)
    monkeypatch.setattr(decode, "packed_linear_weights", plain)
    assert evaluation.decode_split(model, data, vocab, cfg, cpu, torch.bfloat16) == packed
    assert all("forward" not in x.__dict__ for x in model.modules())


# ------------------------------------------------ repetition penalty on the logits
def test_keskar_penalty_divides_positive_and_multiplies_negative_logits_before_the_softmax():
    logits = torch.tensor([[0.0, 0.1, 0.2, 0.3, 2.0, -1.0, 0.5, 3.0]])
    tokens = torch.tensor([[4, 5]])
    out = penalise_repeats(None, tokens, 2.0, "keskar", logits=logits)     # HF's rule
    want = torch.log_softmax(torch.tensor([[0.0, 0.1, 0.2, 0.3, 1.0, -2.0, 0.5, 3.0]]), -1)
    torch.testing.assert_close(out, want)
    # a confident repeat really drops: p = 0.9 from logits (log 9, 0) -> theta 1.2 -> logit log(9)/1.2
    conf = torch.tensor([[-1e4, -1e4, -1e4, -1e4, math.log(9.0), 0.0]])
    p = penalise_repeats(None, torch.tensor([[4]]), 1.2, "keskar", logits=conf).exp()[0, 4].item()
    assert p == pytest.approx(9 ** (1 / 1.2) / (9 ** (1 / 1.2) + 1), abs=1e-6) and p < 0.865
    # without logits (a copy model's mixture) the log-probs stand in for them: p^theta, renormalised
    lp = torch.log(torch.tensor([[1e-30, 1e-30, 1e-30, 1e-30, 0.9, 0.1]]))
    out = penalise_repeats(lp, torch.tensor([[4]]), 1.2, "keskar").exp()
    assert out.sum().item() == pytest.approx(1.0) and out[0, 4].item() == pytest.approx(0.9 ** 1.2 / (0.9 ** 1.2 + 0.1))
    # the old rule, by name: log-probs times theta, not renormalised
    old = penalise_repeats(lp, torch.tensor([[4]]), 1.2, style="logprob").exp()
    assert old[0, 4].item() == pytest.approx(0.9 ** 1.2) and old[0, 5].item() == pytest.approx(0.1)


def test_models_hand_their_step_logits_to_the_decoder():
    """The Transformer's decoding step leaves its raw logits in the state for the repetition penalty;
    the decoder takes them out before ``reorder``."""
    model = peaky_model(1, 2.0, 0.0).eval()
    batch = batch4(0)
    with torch.no_grad():
        state = model.encode(batch)
        lp, state = model.decode_step(state, torch.full((4,), BOS_ID))
    torch.testing.assert_close(torch.log_softmax(state["logits"].float(), -1), lp)
    base = generate(model, batch, DecodeConfig(method="greedy", max_len=8))
    pen = generate(model, batch, DecodeConfig(method="greedy", max_len=8, repetition_penalty=3.0))
    assert base != pen
