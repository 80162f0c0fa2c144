"""MinHash / SimHash cores: datasketch compatibility, shingling (incl. CJK), estimates, bucket keys."""
import itertools
import random

import numpy as np
import pytest
from datasketch import MinHash

from transforms.near_dedup import minhash, simhash

TEXT = ("Augmented assignment is the combination, in a single statement, of a binary operation and an "
        "assignment statement. An augmented assignment evaluates the target only once.")


def _shingles_py(tokens, n):
    """Reference shingle set, plain Python strings."""
    n = min(n, len(tokens))
    return {" ".join(tokens[i:i + n]) for i in range(len(tokens) - n + 1)}


@pytest.mark.parametrize("scheme", ["affine32", "legacy"])
def test_signature_equals_datasketch_on_the_same_hash_values(scheme):
    tokens, _ = minhash.tokenize(TEXT)
    hashes32 = minhash.to_hash32(minhash.shingle_hashes(tokens, 5), "fast")
    reference = MinHash(num_perm=128, seed=7, hashfunc=lambda value: value, scheme=scheme)
    reference.update_batch([int(h) for h in hashes32])
    mine = minhash.MinHasher(num_perm=128, seed=7, scheme=scheme, chunk=5).signature(hashes32)  # several chunks
    assert np.array_equal(mine, reference.hashvalues.astype(np.uint32))


def test_sha1_shingles_give_datasketchs_default_signature_bit_for_bit():
    tokens, _ = minhash.tokenize(TEXT)
    reference = MinHash(num_perm=64, seed=3)  # default scheme and default sha1_hash32
    for shingle in sorted(_shingles_py(tokens, 5)):
        reference.update(shingle.encode("utf-8"))
    mine = minhash.MinHasher(num_perm=64, seed=3).signature(
        minhash.to_hash32(minhash.shingle_hashes_sha1(tokens, 5), "sha1"))
    assert np.array_equal(mine, reference.hashvalues)


def test_different_seeds_give_different_signatures():
    hashes32 = minhash.to_hash32(minhash.shingle_hashes(minhash.tokenize(TEXT)[0], 5), "fast")
    assert not np.array_equal(minhash.MinHasher(seed=1).signature(hashes32), minhash.MinHasher(seed=2).signature(hashes32))


def test_lsh_params_match_datasketch():
    from datasketch import lsh  # a dependency; its private _optimal_param is the reference: gone means re-check
    assert hasattr(lsh, "_optimal_param"), "datasketch no longer exposes _optimal_param: compare lsh_params anew"
    for threshold, num_perm in [(0.8, 128), (0.7, 128), (0.5, 64), (0.9, 256)]:
        assert minhash.lsh_params(threshold, num_perm) == lsh._optimal_param(threshold, num_perm, 0.5, 0.5)


def test_tokenize_normalizes_and_splits_cjk_into_characters():
    tokens, n_cjk = minhash.tokenize("Ｆｕｌｌ-width ＡＢＣ and 中文文本，mixed 混合カタカナ")
    assert tokens[:3] == ["full", "width", "abc"]  # NFKC + lower-case
    assert tokens[4:8] == ["中", "文", "文", "本"] and "mixed" in tokens and tokens[-4:] == ["カ", "タ", "カ", "ナ"]
    assert n_cjk == 10
    # mostly CJK: character units throughout, embedded Latin words spelled out
    units, is_chars = minhash.shingle_units(*minhash.tokenize("中文文本 linux 内核文档"))
    assert is_chars and units == list("中文文本linux内核文档")
    units, is_chars = minhash.shingle_units(*minhash.tokenize("mostly english words with 中文 inside"))
    assert not is_chars and units == ["mostly", "english", "words", "with", "中", "文", "inside"]
    assert minhash.tokenize("plain ascii, Words_1 here")[0] == ["plain", "ascii", "words_1", "here"]


def test_vowel_signs_stay_in_their_word_and_thai_is_shingled_by_characters():
    """A combining mark (a Devanagari or Bengali vowel sign, an Arabic point) is part of its word: ``\\w`` alone
    cut "हिन्दी" into pieces at every sign. Thai, Lao, Myanmar and Khmer are written without spaces between
    words: like Chinese, one token per character, and a mostly-Thai document is shingled by characters."""
    assert minhash.tokenize("हिन्दी भाषा बहुत सुंदर है") == (["हिन्दी", "भाषा", "बहुत", "सुंदर", "है"], 0)
    assert minhash.tokenize("مَرْحَبًا بِكُمْ")[0] == ["مَرْحَبًا", "بِكُمْ"]
    assert minhash.tokenize("বাংলা ভাষা")[0] == ["বাংলা", "ভাষা"]
    thai = "ประเทศไทยมีประชากรประมาณหกสิบหกล้านคน กรุงเทพมหานครเป็นเมืองหลวง"
    units, by_chars = minhash.shingle_units(*minhash.tokenize(thai))
    assert by_chars and units == [c for c in thai if c != " "]
    for text in ("ພາສາລາວ ງາມ", "မြန်မာဘာသာ", "ភាសាខ្មែរ"):
        assert minhash.shingle_units(*minhash.tokenize(text))[1], text
    # a one-word edit in a short Thai text leaves it a near-duplicate, as a one-word edit does in Chinese
    edited = thai.replace("หกสิบหก", "หกสิบเจ็ด")
    a, b = (set(minhash.shingle_set(minhash.shingle_units(*minhash.tokenize(t))[0], 5).tolist()) for t in (thai, edited))
    assert len(a & b) / len(a | b) > 0.75


def test_shingle_hash_sets_give_the_exact_jaccard_of_the_string_sets():
    rng = random.Random(0)
    words = TEXT.split() * 3
    for _ in range(20):
        a = [rng.choice(words) for _ in range(rng.randint(1, 60))]
        b = a[:] if rng.random() < 0.5 else [rng.choice(words) for _ in range(rng.randint(1, 60))]
        for i in range(len(b) // 10):
            b[rng.randrange(len(b))] = rng.choice(words)
        ta, tb = minhash.tokenize(" ".join(a))[0], minhash.tokenize(" ".join(b))[0]
        sa, sb = _shingles_py(ta, 5), _shingles_py(tb, 5)
        expected = len(sa & sb) / len(sa | sb)
        got = minhash.exact_jaccard(minhash.shingle_hashes(ta, 5), minhash.shingle_hashes(tb, 5))
        assert got == pytest.approx(expected)
        assert len(minhash.shingle_hashes(ta, 5)) == len(sa)  # no collisions, one hash per distinct shingle


def test_short_texts_are_one_shingle_and_empty_texts_none():
    assert len(minhash.shingle_hashes(["one", "two"], 5)) == 1
    assert len(minhash.shingle_hashes([], 5)) == 0
    # the shingle of a short text never equals a full-length shingle of a longer one
    longer = minhash.shingle_hashes(["a", "b", "c", "d", "e", "a", "b"], 5)
    assert minhash.shingle_hashes(["a", "b"], 5)[0] not in set(longer)


def test_minhash_estimate_tracks_exact_jaccard():
    rng = np.random.default_rng(1)
    universe = rng.integers(0, 2**63, 4000, dtype=np.uint64)
    hasher = minhash.MinHasher(num_perm=256)
    for overlap in (0.5, 0.8, 0.95):
        k = int(2000 * overlap)
        a = np.unique(universe[:2000])
        b = np.unique(np.concatenate([universe[:k], universe[2000:2000 + 2000 - k]]))
        exact = minhash.exact_jaccard(a, b)
        estimate = minhash.estimated_jaccard(hasher.signature(minhash.to_hash32(a, "fast")),
                                             hasher.signature(minhash.to_hash32(b, "fast")))
        assert abs(estimate - exact) < 0.08


def test_band_keys_are_per_band_and_deterministic():
    sig = minhash.MinHasher().signature(minhash.to_hash32(minhash.shingle_hashes(minhash.tokenize(TEXT)[0], 5), "fast"))
    keys = minhash.band_keys(sig, 9, 13)
    assert len(set(keys)) == 9 and keys == minhash.band_keys(sig.copy(), 9, 13)
    other = sig.copy()
    other[0] ^= 1  # only band 0 changes
    assert [a == b for a, b in zip(keys, minhash.band_keys(other, 9, 13))] == [False] + [True] * 8


def test_simhash_is_close_for_near_copies_and_far_for_unrelated_text():
    tokens = minhash.tokenize(TEXT * 5)[0]
    base = simhash.simhash(minhash.shingle_hashes(tokens, 3))
    edited = tokens[:]
    edited[10] = "replaced"
    near = simhash.simhash(minhash.shingle_hashes(edited, 3))
    far = simhash.simhash(minhash.shingle_hashes(minhash.tokenize("completely different words about gardens, "
                                                                  "tomatoes and the weather in spring")[0], 3))
    assert simhash.hamming(base, near) < simhash.hamming(base, far)
    assert simhash.similarity(base, base) == 1.0


def test_simhash_bucket_keys_never_miss_a_pair_within_the_distance():
    rng = random.Random(5)
    for _ in range(300):
        value = rng.getrandbits(64)
        flipped = value
        for bit in rng.sample(range(64), rng.randint(0, 3)):
            flipped ^= 1 << bit
        assert set(simhash.bucket_keys(value, 6, 3)) & set(simhash.bucket_keys(flipped, 6, 3))
    assert len(simhash.bucket_keys(0, 6, 3)) == len(list(itertools.combinations(range(6), 3)))
    with pytest.raises(ValueError, match="max_distance"):
        simhash.bucket_keys(0, 3, 3)


# ---------------------------------------------------------------- the vectorized shingle path, one-permutation MinHash

EDGE_TEXTS = [
    "", "a", "one two", "!!! ... ???", "Ｆｕｌｌ-width ＡＢＣ and 中文文本，mixed 混合カタカナ", "中文文本 linux 内核文档",
    "ΟΔΟΣ ΚΑΙ ΣΟΦΙΑ Σ σ ς words", "İSTANBUL İi straße", "emoji 😀 and 𝐀𝐁𝐂 math and \U00020000 ext-B",
    "ﬁne ﬂow … ① ㈱ words here", "cafe\u0301 combining e\u0301 marks", "한국어 텍스트 와 ᄒ\u1161 jamo",
    "x\ny\nz w v u t s", "\u2028line sep words\u00a0nbsp", "under_score snake_case 42 3.14",
    "\ufa6c\ufa6d 漢字 compat \uf900 and \u2f00 radicals",
    "हिन्दी भाषा बहुत सुंदर है और words", "ประเทศไทยมีประชากร 66 ล้านคน and some english words here",
    "مَرْحَبًا بِكُمْ فِي الْعَالَمِ", "ភាសាខ្មែរ ພາສາລາວ မြန်မာဘာသာ mixed", "বাংলা ভাষা தமிழ் மொழி",
    "\U0001d167 astral combining \U00011000\U00011038 brahmi",
]


def _reference_set(text, word_ngram=5, cjk_ngram=5):
    units, by_chars = minhash.shingle_units(*minhash.tokenize(text))
    return minhash.shingle_set(units, cjk_ngram if by_chars else word_ngram)


def test_vectorized_shingle_sets_equal_the_reference_tokenizer():
    import gzip
    import json
    from pathlib import Path

    demo = Path(__file__).resolve().parents[1] / "data/demo/corpus.jsonl.gz"
    with gzip.open(demo, "rt", encoding="utf-8") as fh:
        texts = [json.loads(line)["text"] for line in fh][:400]
    texts += EDGE_TEXTS
    random.Random(4).shuffle(texts)  # mixed batches: ASCII, accented, CJK and special texts side by side
    for word_ngram, cjk_ngram in ((5, 5), (3, 2), (1, 7)):
        hasher = minhash.ShingleHasher(word_ngram, cjk_ngram)
        got = hasher.shingle_sets(texts)
        for text, shingles in zip(texts, got):
            assert np.array_equal(shingles, _reference_set(text, word_ngram, cjk_ngram)), text[:80]
        assert all(np.array_equal(hasher.shingle_set(t), s) for t, s in zip(texts[:30], got[:30]))  # batch == one


def test_word_hashes_are_the_same_inside_a_text_and_alone():
    tokens = minhash.tokenize("Augmented assignment, augmented ASSIGNMENT: one two")[0]
    assert tokens == ["augmented", "assignment", "augmented", "assignment", "one", "two"]
    hashes = minhash.word_hashes(tokens)
    assert hashes[0] == hashes[2] and hashes[1] == hashes[3] and len(set(hashes.tolist())) == 4
    assert minhash.word_hashes(["one"])[0] == hashes[4]


def test_one_permutation_estimate_is_unbiased_and_as_tight_as_k_permutations():
    """Over many random pairs: the one-permutation estimate's bias is near 0 and its spread no wider than that
    of 128 independent permutations (datasketch's scheme), for long sets and for sets shorter than 128."""
    rng = np.random.default_rng(2)
    for size in (40, 300, 3000):
        for overlap in (0.5, 0.9):
            errors = {"oph": [], "affine32": []}
            for trial in range(30):
                universe = rng.integers(0, 2**32, 4 * size, dtype=np.uint64).astype(np.uint32)
                k = int(size * overlap)
                a = np.unique(universe[:size])
                b = np.unique(np.concatenate([universe[:k], universe[size:2 * size - k]]))
                exact = minhash.exact_jaccard(a, b)
                for scheme in errors:
                    hasher = minhash.make_hasher(128, trial + 1, scheme)
                    sig = hasher.signatures([a, b])
                    errors[scheme].append(minhash.estimated_jaccard(sig[0], sig[1]) - exact)
            oph, k_perm = np.array(errors["oph"]), np.array(errors["affine32"])
            assert abs(oph.mean()) < 0.03, (size, overlap, oph.mean())
            assert np.sqrt((oph ** 2).mean()) <= 1.3 * np.sqrt((k_perm ** 2).mean()) + 0.01, (size, overlap)


def test_one_permutation_signatures_are_deterministic_seeded_and_batch_independent():
    rng = np.random.default_rng(3)
    sets = [np.unique(rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)) for n in (1, 5, 127, 900)]
    hasher = minhash.OnePermutationHasher(128, seed=1)
    batch = hasher.signatures(sets)
    assert all(np.array_equal(hasher.signature(s), row) for s, row in zip(sets, batch))
    assert np.array_equal(minhash.OnePermutationHasher(128, seed=1).signatures(sets), batch)
    assert not np.array_equal(minhash.OnePermutationHasher(128, seed=2).signatures(sets), batch)
    assert len(set(batch[0].tolist())) == 1  # one shingle: every bin densified from the only one
    # identical sets agree everywhere, sets sharing nothing (almost) nowhere, however short
    assert minhash.estimated_jaccard(hasher.signature(sets[1]), hasher.signature(sets[1].copy())) == 1.0
    other = (sets[1].astype(np.uint64) + 1).astype(np.uint32)
    assert minhash.estimated_jaccard(hasher.signature(sets[1]), hasher.signature(other)) < 0.1


def test_datasketch_compatible_mode_gives_datasketchs_signature_end_to_end():
    from transforms.near_dedup.core import NearDedupConfig, SketchBuilder

    cfg = NearDedupConfig(scheme="affine32", shingle_hash="sha1", seed=5, num_perm=64)
    sketch = SketchBuilder(cfg).sketch({"id": 1, "text": TEXT + " Ｆｕｌｌ width and more words here"})
    reference = MinHash(num_perm=64, seed=5)
    tokens, _ = minhash.tokenize(TEXT + " Ｆｕｌｌ width and more words here")
    reference.update_batch([s.encode("utf-8") for s in _shingles_py(tokens, 5)])
    assert np.array_equal(sketch.signature, reference.hashvalues)


def test_band_key_matrix_packs_band_index_and_hash():
    rng = np.random.default_rng(5)
    sigs = rng.integers(0, 2**32, (50, 128), dtype=np.uint64).astype(np.uint32)
    sigs[1] = sigs[0]
    sigs[2, :9] = sigs[0, :9]  # agrees with document 0 on band 0 only
    keys = minhash.band_key_matrix(sigs, 14, 9)
    assert keys.dtype == np.int64 and keys.shape == (50, 14)
    assert np.array_equal(keys[0], keys[1]) and keys[0, 0] == keys[2, 0] and not (keys[0, 1:] == keys[2, 1:]).any()
    assert ((keys.view(np.uint64) >> np.uint64(64 - minhash.BAND_BITS)) == np.arange(14, dtype=np.uint64)).all()
    assert minhash.band_keys(sigs[3], 14, 9) == keys[3].tolist()
    assert len(np.unique(keys[3:, 5])) == 47  # different bands' contents: different keys


def test_exact_jaccard_of_sorted_sets_equals_set_arithmetic():
    rng = random.Random(6)
    for _ in range(50):
        a = sorted(rng.sample(range(1000), rng.randint(0, 80)))
        b = sorted(rng.sample(range(1000), rng.randint(0, 80)))
        expected = len(set(a) & set(b)) / len(set(a) | set(b)) if a and b else 0.0
        got = minhash.exact_jaccard(np.array(a, dtype=np.uint32), np.array(b, dtype=np.uint32))
        assert got == pytest.approx(expected)


def test_vectorized_shingle_sets_equal_the_reference_on_random_unicode():
    """Random texts over mixed scripts (combining marks, Hangul jamo and syllables, Greek sigma, dotted İ,
    compatibility ideographs, ligatures, full-width forms, astral letters and emoji, Devanagari, Thai, Arabic,
    Khmer and Hebrew with their signs and points, astral combining marks): the table-driven NFKC +
    lower case of whole batches gives the reference tokenizer's shingles."""
    rng = random.Random(18)
    pools = [range(0x20, 0x7F), range(0xA0, 0x250), range(0x300, 0x370), range(0x370, 0x400), range(0x1100, 0x1200),
             range(0xAC00, 0xAC40), range(0x3040, 0x3100), range(0x4E00, 0x4E40), range(0xF900, 0xF920),
             range(0xFB00, 0xFB10), range(0xFF00, 0xFF60), range(0x2000, 0x2100), range(0x1D400, 0x1D420),
             range(0x1F600, 0x1F610), [0x3A3, 0x130, 0x20, 0x20, 0xA], range(0x900, 0x980), range(0xE00, 0xE80),
             range(0x600, 0x700), range(0x1780, 0x1800), range(0x591, 0x5F5), range(0x1D165, 0x1D16A)]
    texts = []
    for _ in range(400):
        chosen = rng.sample(pools, rng.randint(1, 4))
        texts.append("".join(chr(rng.choice(rng.choice(chosen))) if rng.random() > 0.25 else " "
                             for _ in range(rng.randint(0, 120))))
    for word_ngram, cjk_ngram in ((5, 5), (2, 3)):
        got = minhash.ShingleHasher(word_ngram, cjk_ngram).shingle_sets(texts)
        for text, shingles in zip(texts, got):
            assert np.array_equal(shingles, _reference_set(text, word_ngram, cjk_ngram)), repr(text[:60])
