"""Pure-core tests of quality scoring: features, language model, stacker, decisions, config (no Beam, fast)."""
from __future__ import annotations

import gzip
import json
import os
import random
import time
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from transforms.quality.step import (QualityConfig, cutoff_from_quantiles, decide, keep_pareto, pareto_draw,
                                top_fraction_cutoff)
from transforms.quality.features import (HashedNgramLM, OrderFeatures, WordClasses, split_token, stable_word_key,
                                         tokenize)
from transforms.quality.model import LogisticStacker, binary_metrics, roc_auc, split_records, QualityTrainConfig

SUBSET = Path(__file__).resolve().parents[1] / "data" / "quality" / "quality_train_subset.jsonl.gz"


@pytest.fixture(scope="module")
def prose() -> list[str]:
    """High-quality passages from the shipped labelled subset."""
    with gzip.open(SUBSET, "rt", encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh]
    return [r["text"] for r in records if r["label"] == "hq"]


def shuffle_words(text: str, rng: random.Random) -> str:
    words = text.split()
    rng.shuffle(words)
    return " ".join(words)


def markov_chain(corpus: list[str]) -> dict[str, list[str]]:
    """Order-1 word transitions of ``corpus``."""
    following: dict[str, list[str]] = {}
    for text in corpus:
        words = text.split()
        for a, b in zip(words, words[1:]):
            following.setdefault(a, []).append(b)
    return following


def markov_babble(following: dict[str, list[str]], starts: list[str], length: int, rng: random.Random) -> str:
    """Text from an order-1 word Markov chain: every adjacent word pair is real, nothing longer is."""
    word = rng.choice(starts)
    out = [word]
    while len(out) < length:
        word = rng.choice(following.get(word) or starts)
        out.append(word)
    return " ".join(out)


def test_tokens_keep_case_and_glued_punctuation():
    assert tokenize("Hello, World!\n It's  2024.", 100) == ["Hello,", "World!", "It's", "2024."]
    assert len(tokenize("word " * 1000, 16)) == 16
    assert split_token('"Well,') == ('"', "Well", ",")
    assert split_token("--") == ("", "", "--")
    assert split_token("it's") == ("", "it's", "")


def test_word_classes_map_frequent_words_to_themselves_and_others_to_shapes():
    classes = WordClasses.fit(["the cat and the dog, and the bird."], num_frequent=2, max_tokens=100)
    assert set(classes.frequent) == {"the", "and"}
    assert classes.class_name("The") == "|^the|"
    assert classes.class_name("walking,") == "|<ng>|,"
    assert classes.class_name('"Walking') == '"|^<ng>|'
    assert classes.class_name("1999.") == "|<digits>|."
    assert classes.class_name("NASA") == "|<CAPS>|"
    assert classes.class_name("--") == "||<punct>"
    restored = WordClasses.from_json(classes.to_json())
    assert restored.frequent == classes.frequent


def test_ngram_model_prefers_the_order_it_was_trained_on():
    rng = random.Random(0)
    vocab = list(range(1, 21))
    ordered = [[vocab[(start + i) % 20] for i in range(40)] for start in range(200)]
    lm = HashedNgramLM(order=3, bits=14, discount=0.75).fit(ordered, vocab_size=22)
    shuffled = [rng.sample(seq, len(seq)) for seq in ordered[:20]]
    lp_ordered, _ = lm.token_logprobs(ordered[:20])
    lp_shuffled, _ = lm.token_logprobs(shuffled)
    # the trigram model is far better on ordered text; on shuffled text context does not help at all
    assert lp_ordered[2].mean() > lp_shuffled[2].mean() + 1.0
    assert (lp_ordered[1] - lp_ordered[0]).mean() > 1.0
    assert (lp_shuffled[1] - lp_shuffled[0]).mean() < 0.0


def test_ngram_model_counting_only_shared_ngrams_gains_nothing_from_one_documents_own_ngrams():
    rng = random.Random(3)
    # many documents share their word order (ids 1-10); one also has a passage of its own (ids 20-39)
    common = [[1 + (start + i) % 10 for i in range(40)] for start in range(100)]
    own = [rng.randrange(20, 40) for _ in range(60)]
    document = common[0][:20] + own

    def own_passage_gain(train, **kwargs):
        """The gain of the trigram context over none across the document's own passage (what the features see)."""
        lm = HashedNgramLM(order=3, bits=16, discount=0.75).fit(train, vocab_size=41, **kwargs)
        logprobs, _ = lm.token_logprobs([document])
        return (logprobs[2] - logprobs[0])[22:].mean()

    # counting every n-gram, the model predicts the passage it was trained on far better than without it ...
    assert own_passage_gain(common + [document]) - own_passage_gain(common) > 1.0
    # ... counting only n-grams of two or more documents, exactly as well as if it had never seen it
    assert own_passage_gain(common + [document], min_docs=2) == own_passage_gain(common, min_docs=2)
    # documents are groups: two copies of it in one group are one document, in two groups two
    twice = common + [document, document]
    groups = list(range(len(common))) + [-1, -1]
    assert own_passage_gain(twice, groups=groups, min_docs=2) == own_passage_gain(common, min_docs=2)
    assert own_passage_gain(twice, min_docs=2) > own_passage_gain(common, min_docs=2) + 1.0


def test_order_features_separate_prose_from_shuffled_words_and_markov_babble(prose):
    rng = random.Random(1)
    train, held = prose[:600], prose[600:700]
    features = OrderFeatures.fit(train, num_frequent=300, order=3, bits=18, max_tokens=256)
    names = features.names
    real = features.transform(held)
    salad = features.transform([shuffle_words(t, rng) for t in held])
    following = markov_chain(prose[700:])
    starts = sorted(following)
    babble = features.transform([markov_babble(following, starts, len(t.split()), rng) for t in held])
    gain2 = names.index("class_gain2")
    cache = names.index("cache_gain")
    y = np.r_[np.ones(len(held)), np.zeros(len(held))].astype(bool)
    # word salad destroys bigram structure; Markov babble destroys topical cohesion
    assert roc_auc(y, np.r_[real[:, gain2], salad[:, gain2]]) > 0.95
    assert roc_auc(y, np.r_[real[:, cache], babble[:, cache]]) > 0.9
    # serialisation round trip gives identical features
    again = OrderFeatures.from_arrays(features.to_arrays())
    np.testing.assert_allclose(again.transform(held[:10]), real[:10])


def test_order_features_handle_empty_odd_and_foreign_text(prose):
    features = OrderFeatures.fit(prose[:200], num_frequent=100, order=3, bits=16)
    x = features.transform(["", "   ", "!!!", "数据清洗是很重要的。", "x" * 50_000, prose[0]])
    assert x.shape == (6, len(features.names))
    assert np.isfinite(x).all()
    assert (x[:2] == 0).all()  # no tokens: all features zero, no crash


def test_logistic_stacker_sample_weights_count_like_repeated_rows():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(300, 3))
    y = (x[:, 0] + 0.5 * rng.normal(size=300) > 0).astype(np.float64)
    weights = rng.integers(0, 3, size=300).astype(np.float64)  # 0: left out, 2: counted twice
    y[weights == 0] = 1 - y[weights == 0]  # rows left out say the opposite: ignoring the weights would show
    weighted = LogisticStacker.fit(x, y, l2=0.1, sample_weight=weights)
    repeated = np.repeat(np.arange(300), weights.astype(int))
    plain = LogisticStacker.fit(x[repeated], y[repeated], l2=0.1)
    unweighted = LogisticStacker.fit(x, y, l2=0.1)
    spread = np.abs(plain.logit(x)).max()
    # the same fit up to the standardisation (computed over the rows as given) that the L2 penalty acts on
    assert np.abs(weighted.logit(x) - plain.logit(x)).max() < 0.05 * spread
    assert np.abs(unweighted.logit(x) - plain.logit(x)).max() > 0.3 * spread


def test_logistic_stacker_learns_a_separable_problem():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 3))
    y = (x[:, 0] - 2 * x[:, 2] > 0).astype(float)
    model = LogisticStacker.fit(x, y, l2=0.1)
    assert ((model.logit(x) > 0) == (y > 0)).mean() > 0.97
    restored = LogisticStacker.from_arrays(model.to_arrays("p_"), "p_")
    np.testing.assert_allclose(restored.logit(x), model.logit(x))


def test_metrics_and_auc():
    y = np.array([1, 1, 0, 0], dtype=bool)
    m = binary_metrics(y, np.array([0.9, 0.4, 0.6, 0.1]))
    assert m["accuracy"] == 0.5 and m["precision"] == 0.5 and m["recall"] == 0.5
    assert m["auc"] == pytest.approx(0.75)
    assert roc_auc(y, np.full(4, 0.3)) == pytest.approx(0.5)


def test_split_never_puts_one_group_on_both_sides():
    records = [{"text": "t", "label": "hq", "group": f"g{i % 37}"} for i in range(500)]
    train, held = split_records(records, QualityTrainConfig())
    assert {records[i]["group"] for i in train}.isdisjoint({records[i]["group"] for i in held})
    assert 0 < len(held) < len(train)


def test_threshold_decision():
    cfg = QualityConfig(threshold=0.7)
    assert decide(0.71, 1, cfg) is None
    assert decide(0.69, 1, cfg) == "low_quality"


def test_pareto_decision_is_deterministic_and_monotone_in_score():
    cfg = QualityConfig(mode="pareto", pareto_alpha=9, seed=3)
    ids = range(4000)
    first = [decide(0.5, i, cfg) for i in ids]
    assert first == [decide(0.5, i, cfg) for i in ids]  # same ids, same seed: same documents survive
    other_seed = QualityConfig(mode="pareto", pareto_alpha=9, seed=4)
    assert first != [decide(0.5, i, other_seed) for i in ids]
    kept = {s: np.mean([keep_pareto(s, i, 9, 3) for i in ids]) for s in (0.2, 0.5, 0.9, 1.0)}
    assert kept[0.2] < kept[0.5] < kept[0.9] < kept[1.0] == 1.0
    # numpy's Pareto (Lomax) with alpha 9: P(X > 1 - s) = (2 - s) ** -9
    assert kept[0.9] == pytest.approx(1.1 ** -9, abs=0.03)
    assert pareto_draw(7, 9, 3) == pareto_draw(7, 9, 3) >= 0


def test_top_fraction_cutoffs():
    scores = [0.1, 0.9, 0.5, 0.7, 0.3]
    assert top_fraction_cutoff(scores, 0.4) == 0.7
    assert top_fraction_cutoff(scores, 1.0) == 0.1
    quantiles = list(np.linspace(0, 1, 1001))
    assert cutoff_from_quantiles(quantiles, 0.25) == pytest.approx(0.75)
    cfg = QualityConfig(mode="top_fraction", top_fraction=0.25)
    assert decide(0.8, 1, cfg, cutoff=0.75) is None
    assert decide(0.7, 1, cfg, cutoff=0.75) == "below_top_fraction"
    with pytest.raises(ValueError, match="cut-off"):
        decide(0.7, 1, cfg)


def test_config_errors_name_the_field_and_allowed_values():
    with pytest.raises(ValidationError) as err:
        QualityConfig(mode="best")
    assert "mode" in str(err.value) and "top_fraction" in str(err.value)
    with pytest.raises(ValidationError, match="threshold"):
        QualityConfig(threshold=1.5)
    with pytest.raises(ValidationError, match="treshold"):
        QualityConfig(treshold=0.5)  # typo: extra keys are forbidden
    with pytest.raises(ValidationError, match="word_ngrams"):
        QualityConfig(train={"word_ngrams": 0})


def test_chinese_documents_are_kept_unscored_by_the_english_model():
    """The default model knows English only: CJK documents pass through with the reason recorded."""
    from transforms.quality.step import QualityConfig, QualityStep, ensure_default_model

    cfg = QualityConfig()
    # the session's model cache (tests/conftest.py): the model prepare trains by default, trained once
    model = ensure_default_model(Path(os.environ["CORPUSMILL_CACHE"]) / "quality", cfg, log=lambda _: None)
    zh = {"id": 1, "text": "在软件包管理中，依赖关系决定了安装的顺序，系统会自动解决冲突并提示用户确认。",
          "annotations": {"normalize": {"script": "cjk"}}}
    en = {"id": 2, "text": "the the the buy now cheap cheap click here click here",
          "annotations": {"normalize": {"script": "other"}}}
    reasons = QualityStep(cfg, model).apply([zh, en])
    assert reasons[0] is None and zh["annotations"]["quality"]["score"] is None
    assert "skipped" in zh["annotations"]["quality"] and en["annotations"]["quality"]["score"] is not None
    strict = cfg.model_copy(update={"skip_scripts": []})
    zh["annotations"] = {"normalize": {"script": "cjk"}}
    assert QualityStep(strict, model).apply([zh])[0] == "low_quality"


DIALOGUE = ('"I am sure you will like it," said she. "You cannot think what a sweet place it is." He smiled at her '
            'and she turned to the window, where the rain fell on the garden.')


def test_quote_roles_read_straight_and_curly_quotes_alike():
    from transforms.quality.features import QUOTE_CLOSES, QUOTE_OPENS, QUOTE_UNPLACED, quote_role

    assert quote_role('"Yes."') == quote_role("\u201cYes.\u201d") == QUOTE_OPENS | QUOTE_CLOSES
    assert quote_role('"Well') == quote_role("\u201cWell") == QUOTE_OPENS
    assert quote_role('it,"') == quote_role('said."') == quote_role("it,\u201d") == QUOTE_CLOSES
    assert quote_role("word") == quote_role('12"') & QUOTE_OPENS == 0
    # a mark spaced off its word, or inside a token, has no direction: it is only known to be there
    assert quote_role('"') == quote_role('{0}!".format') == QUOTE_UNPLACED
    assert quote_role('"a"b') == QUOTE_OPENS | QUOTE_UNPLACED


def test_english_version_3_counts_persons_per_voice_and_quote_alternation(prose):
    features = OrderFeatures.fit(prose[:200], num_frequent=100, order=3, bits=16)
    assert features.feature_version == OrderFeatures.ENGLISH_FEATURE_VERSION == 4
    names = features.names
    assert {"voice_pronoun_entropy", "quote_alternation", "half_overlap"} <= set(names)
    assert "odd_quotes" not in names and "pronoun_entropy" not in names
    curly = DIALOGUE.replace(' "', " \u201c").replace('"', "\u201d").replace("\u201dI", "\u201cI")
    scrambled = 'I am sure you," will like it said she. "You "cannot think what a sweet" place it is. He smiled'
    x = features.transform([DIALOGUE, curly, scrambled, DIALOGUE.replace('"', "")])
    voice, alternation = names.index("voice_pronoun_entropy"), names.index("quote_alternation")
    # speech ("I", "you") and narration ("she", "he", "her") each keep to their persons; without the quotes
    # the same pronouns are one mixed voice
    assert x[0, voice] < x[3, voice]
    mine = [voice, alternation, names.index("half_overlap")]
    np.testing.assert_allclose(x[0, mine], x[1, mine])  # straight and curly quotes read alike
    assert x[0, alternation] == 0.0 and x[3, alternation] == 0.0
    assert x[2, alternation] == pytest.approx(1 / 5)  # C O O C: one opening after an opening, per 4 marks + 1
    assert np.isfinite(x).all()


def arrays_with_feature_version(features: OrderFeatures, version: int | None) -> tuple[int, dict]:
    """(the feature version ``features`` writes, its arrays recording ``version`` instead: None, no version at
    all, as models written before version 2 hold)."""
    arrays = features.to_arrays()
    meta = json.loads(bytes(arrays["order_meta"]).decode("utf-8"))
    written = meta.pop("feature_version")
    if version is not None:
        meta["feature_version"] = version
    arrays["order_meta"] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    return written, arrays


def test_quote_alternation_starts_afresh_after_a_mark_spaced_off_or_inside_a_token(prose):
    features = OrderFeatures.fit(prose[:100], num_frequent=50, order=3, bits=14)
    version_2 = OrderFeatures.from_arrays(arrays_with_feature_version(features, 2)[1])
    alternation = features.names.index("quote_alternation")
    spaced = 'He wrote "I will come tomorrow. " Then she said "Yes, do," and he came.'
    code = 'Use "{0}!".format(name) and then "done" to see it work.'
    x3, x2 = features.transform([spaced, code]), version_2.transform([spaced, code])
    assert (x3[:, alternation] == 0).all()  # the unplaced mark may be the closing one: no repeat
    assert (x2[:, alternation] > 0).all()  # version 2 (still read) counted the next opening mark as a repeat
    babble = 'said "the rain "fell on her "garden and" the window" was'  # a chain keeps quoted words, not the order
    assert features.transform([babble])[0, alternation] > 0


def test_english_models_of_feature_version_1_still_load_and_score_as_before(prose, tmp_path):
    from transforms.base import StepConfigError
    from transforms.quality.model import unreadable_reason
    from transforms.quality.step import check

    features = OrderFeatures.fit(prose[:100], num_frequent=50, order=3, bits=14)
    written, arrays = arrays_with_feature_version(features, None)  # as an English model before version 2
    assert written == 4
    old = OrderFeatures.from_arrays(arrays)
    assert old.feature_version == 1 and old.names[5:7] == ["pronoun_entropy", "odd_quotes"]
    assert "half_overlap" not in old.names
    x = old.transform(['one "odd quote', DIALOGUE])
    assert x.shape == (2, len(old.names)) and x[0, 6] == 1.0 and x[1, 6] == 0.0
    # a model fitted on a feature version this code does not compute is refused by name, not misread
    _, arrays = arrays_with_feature_version(features, 9)
    arrays["format_version"] = np.array([2])
    np.savez(tmp_path / "m.bin.order.npz", **arrays)
    assert "order features version 9 (whitespace)" in unreadable_reason(str(tmp_path / "m.bin"))
    (tmp_path / "m.bin").write_bytes(b"")
    with pytest.raises(StepConfigError, match=r"^quality\.model: .*order features version 9"):
        check(QualityConfig(model=str(tmp_path / "m.bin")))  # when the run is checked, not in a worker
    with pytest.raises(ValueError, match="version 9"):
        OrderFeatures.from_arrays(arrays)


def test_word_ngram_columns_lower_a_score_only_where_they_say_chain():
    from transforms.quality.model import ChainGuardedStage, SecondStage

    rng = np.random.default_rng(3)
    names = ["cohesion", "word_trigram_kept", "word_bigram_known"]
    x = rng.random((600, 3))
    p_fasttext = rng.uniform(0.2, 0.99, 600)
    chain = x[:, 2] * (1 - x[:, 1])
    # low quality: low cohesion, or a chain; the fits differ, so the guard has something to decide
    y = ((x[:, 0] > 0.3) & (chain < 0.35)).astype(np.float64)
    stage = ChainGuardedStage.fit(p_fasttext, x, y, 1.0, 0.1, names, chain_min=0.3)
    full = SecondStage.fit(p_fasttext, x, y, 1.0, 0.1)
    plain = SecondStage.fit(p_fasttext, x[:, :1], y, 1.0, 0.1)
    guarded, says_chain = stage.predict_logit(p_fasttext, x), chain >= 0.3
    np.testing.assert_allclose(guarded[says_chain], full.predict_logit(p_fasttext, x)[says_chain])
    best = np.maximum(full.predict_logit(p_fasttext, x), plain.predict_logit(p_fasttext, x[:, :1]))
    np.testing.assert_allclose(guarded[~says_chain], best[~says_chain])
    assert (best[~says_chain] > full.predict_logit(p_fasttext, x)[~says_chain]).any()
    # saved and loaded as the guarded stage; arrays without the plain stage load as a SecondStage (older models)
    arrays = stage.to_arrays("stack_")
    restored = ChainGuardedStage.from_arrays(arrays, "stack_")
    np.testing.assert_allclose(restored.predict_logit(p_fasttext, x), guarded)
    older = ChainGuardedStage.from_arrays(full.to_arrays("stack_"), "stack_")
    assert type(older) is SecondStage and restored.gate == 0.1


def test_default_model_cache_key_carries_the_feature_version(tmp_path, monkeypatch):
    from transforms.quality.step import default_model_path

    cfg = QualityConfig()
    now = default_model_path(tmp_path, cfg)
    assert now == default_model_path(tmp_path, cfg)
    monkeypatch.setitem(OrderFeatures.READABLE_FEATURE_VERSIONS, "whitespace", (1, 2, 3, 4, 5))
    assert default_model_path(tmp_path, cfg) != now  # a model of other features is trained again, not reused


def test_english_version_4_word_trigrams_tell_a_word_chain_over_the_training_prose_from_new_prose(prose):
    """A chain over the prose the model learnt keeps its word pairs (both bigrams of a trigram known) but not its
    triples (few of those trigrams known); unseen real passages know fewer pairs and keep more of their triples."""
    rng = random.Random(7)
    train, unseen = prose[:600], prose[600:700]
    features = OrderFeatures.fit(train, num_frequent=200, order=3, bits=16)
    kept, known = features.names.index("word_trigram_kept"), features.names.index("word_bigram_known")
    following = markov_chain(train)
    starts = [t.split()[0] for t in train]
    babble = [markov_babble(following, starts, 150, rng) for _ in range(60)]
    x_real, x_babble = features.transform(unseen), features.transform(babble)
    assert np.median(x_babble[:, known]) > np.median(x_real[:, known]) + 0.1
    assert np.median(x_babble[:, kept]) < np.median(x_real[:, kept]) - 0.05
    # the training prose itself: every trigram known
    assert (features.transform(train[:5])[:, kept] > 0.95).all()  # (smoothed towards 0.5 by 8 pseudo-trigrams)
    # text with no known word pair gets the neutral 0.5, not 0 (no evidence of a chain)
    assert features.transform(["zqx vbn wqp mnb lkj hgf dsa poi"])[0, [kept, known]].tolist() == [0.5, 0.0]
    # the keys are process-independent (Python's str hash is not): a saved model reads the same in any process
    assert stable_word_key("Her,") == stable_word_key("her,") == 0x5F0DBF5603E3016C
    loaded = OrderFeatures.from_arrays(features.to_arrays())
    np.testing.assert_array_equal(loaded.transform(babble[:5]), x_babble[:5])
    # version 3 (still read) has neither column nor tables
    _, arrays = arrays_with_feature_version(features, 3)
    arrays = {k: v for k, v in arrays.items() if "word_" not in k or k == "order_word_counts"}
    old = OrderFeatures.from_arrays(arrays)
    assert old.feature_version == 3 and "word_trigram_kept" not in old.names


def test_a_default_model_another_process_is_training_is_waited_for_not_trained_twice(tmp_path, monkeypatch):
    """Runs sharing a model cache (CORPUSMILL_CACHE, parallel jobs) train the default model once: a second one
    finds the training lock held, says so, waits, and reads the model the first wrote."""
    import fcntl
    import threading

    import transforms.quality.step as step
    from transforms.quality.model import sidecar_paths

    cfg = QualityConfig()
    path = step.default_model_path(tmp_path, cfg)
    trained, lines = [], []
    monkeypatch.setattr(step, "_train_default", lambda *args: trained.append(args) or "trained here")
    fd = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)  # the other process, training
    got = []
    waiter = threading.Thread(target=lambda: got.append(step.ensure_default_model(tmp_path, cfg, log=lines.append)))
    waiter.start()
    for _ in range(200):
        if lines:
            break
        time.sleep(0.01)
    assert lines and "another process is training the default model" in lines[0] and waiter.is_alive()
    for name in (str(path), *sidecar_paths(str(path))):  # the other process's model lands, then it lets go
        Path(name).write_bytes(b"model")
    os.close(fd)
    waiter.join(timeout=10)
    assert got == [str(path)] and not trained
    # with nothing cached and nobody training, it trains (under the lock)
    path.unlink()
    assert step.ensure_default_model(tmp_path, cfg, log=lines.append) == "trained here" and len(trained) == 1
