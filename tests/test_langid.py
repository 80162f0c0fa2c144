"""Language identification (transforms/langid.py) and the per-language routing of the filters."""
import gzip
import json
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to

from pipelines.config import ConfigError, validate_config
from transforms.base import StepConfigError
from transforms.beam_step import ApplyStep
from transforms.filters import FiltersConfig, HeuristicFilterStep, Thresholds
from transforms.langid import LangIdConfig, LangIdentifier, LangIdStep, check, document_language, sample_text
from transforms.normalize import NormalizeConfig, NormalizeStep, normalize_text
from transforms.text_units import cjk_ratio

SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "real_text_sample.jsonl.gz"
EN = "The package manager resolves the dependencies of a package and installs them in the right order."
ZH = "软件包管理器会解析软件包的依赖关系，并按照正确的顺序安装它们。如果出现冲突，系统会提示用户确认。"
POEM = "忽如一夜春风来，千树万树梨花开。     -- 岑参《白雪歌送武判官归京》"  # lid.176 alone: ja


@pytest.fixture(scope="module")
def identifier() -> LangIdentifier:
    ident = LangIdentifier()
    ident.setup()
    return ident


def _doc(text: str, i: int = 0) -> dict:
    return {"id": i, "text": text, "source": "t", "meta": {}, "annotations": {}}


def test_sample_reads_pieces_spread_over_a_long_document():
    text = "A" * 1000 + "B" * 1000 + "C" * 1000 + "D\nE" * 500
    sample = sample_text(text, max_chars=400, windows=4)
    assert set(sample) >= {"a", "b", "c", "d", "e"} and "\n" not in sample and len(sample) <= 400 + 3
    assert sample_text("Short\nText", 400, 4) == "short text"


def test_identifies_languages_and_scripts(identifier):
    texts = [EN, ZH, "Le gestionnaire de paquets résout les dépendances et les installe dans le bon ordre.",
             "パッケージマネージャーは依存関係を解決し、正しい順序でインストールします。",
             "패키지 관리자는 종속성을 해결하고 올바른 순서로 설치합니다.",
             "Менеджер пакетов разрешает зависимости и устанавливает их в правильном порядке."]
    got = [(r["lang"], r["script"]) for r in identifier.identify(texts)]
    assert got == [("en", "Latn"), ("zh", "Hani"), ("fr", "Latn"), ("ja", "Jpan"), ("ko", "Kore"), ("ru", "Cyrl")]
    assert all(0.5 < r["score"] <= 1.0 and r["second"] is None for r in identifier.identify(texts))


def test_the_script_of_the_letters_constrains_the_language(identifier):
    raw = identifier._predict([sample_text(POEM, 1000, 4)])[0]
    assert raw[0][0] == "ja"  # what lid.176 alone says about this Tang poem (no kana in it)
    assert identifier.identify([POEM])[0]["lang"] == "zh"
    # Latin letters only: never a CJK language, whatever lid.176 ranks first
    assert identifier.identify(["cd /usr/src && make -j4 && make install"])[0]["lang"] not in ("zh", "ja", "ko")


def test_a_mixed_document_gets_its_dominant_language_and_the_second_one_with_its_share(identifier):
    # opens with an untranslated English paragraph: the head alone reads English
    text = EN + " " + EN + "\n\n" + "\n\n".join([ZH] * 12)
    result = identifier.identify([text])[0]
    assert result["lang"] == "zh" and result["second"] == "en"
    assert result["second_share"] == pytest.approx(1 - cjk_ratio(text), abs=1e-3) and result["second_share"] > 0.05
    assert 0.2 < cjk_ratio(text) < 0.8  # mixed: lid.176 decides, on pieces spread over the document
    head_only = LangIdentifier(LangIdConfig(windows=1, max_chars=150))
    assert head_only.identify([text])[0]["lang"] == "en"  # what reading the head alone gives
    mostly_zh = EN + "\n\n" + "\n\n".join([ZH] * 20)
    assert cjk_ratio(mostly_zh) >= 0.8 and head_only.identify([mostly_zh])[0]["lang"] == "zh"  # the script decides
    assert identifier.identify([EN])[0]["second_share"] == 0.0


def test_keep_min_score_and_tagging():
    docs = [_doc(EN, 1), _doc(ZH, 2)]
    NormalizeStep(NormalizeConfig()).apply(docs)
    assert LangIdStep(LangIdConfig(keep=["en"])).apply(docs) == [None, "language"]
    assert docs[1]["annotations"]["langid"]["passed"] is False and docs[0]["annotations"]["langid"]["passed"]
    assert LangIdStep(LangIdConfig(keep=["en"], action="tag")).apply(docs) == [None, None]
    assert LangIdStep(LangIdConfig(min_score=1.0)).apply(docs) == ["language_score", "language_score"]
    plain = [_doc(EN)]
    LangIdStep(LangIdConfig()).apply(plain)
    assert set(plain[0]["annotations"]["langid"]) == {"lang", "score", "script", "second", "second_share"}


def test_config_problems_name_the_field(tmp_path):
    with pytest.raises(StepConfigError, match=r"^langid\.model: .*missing\.ftz does not exist"):
        check(LangIdConfig(model=str(tmp_path / "missing.ftz")))
    with pytest.raises(StepConfigError, match=r"^langid\.keep: an empty list"):
        check(LangIdConfig(keep=[]))
    with pytest.raises(ConfigError, match=r"langid\.action"):
        validate_config({"name": "x", "input": {"paths": ["x"]}, "langid": {"action": "drop"}})


def test_beam_step_counts_and_routes():
    docs = [_doc(EN, 1), _doc(ZH, 2), _doc(EN + " It works.", 3)]
    NormalizeStep(NormalizeConfig()).apply(docs)
    with beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions(["--direct_num_workers=1"])) as p:
        out = p | beam.Create(docs) | ApplyStep(LangIdStep(LangIdConfig(keep=["zh"])))
        assert_that(out.kept | "KeptIds" >> beam.Map(lambda d: (d["id"], d["annotations"]["langid"]["lang"])),
                    equal_to([(2, "zh")]), label="kept")
        assert_that(out.removed | "RemovedIds" >> beam.Map(lambda d: (d["id"], d["removed_by"], d["reason"])),
                    equal_to([(1, "langid", "language"), (3, "langid", "language")]), label="removed")


def test_filters_follow_the_language_and_fall_back_to_the_script():
    german = ("Die Paketverwaltung löst die Abhängigkeiten auf und installiert die Pakete in der richtigen "
              "Reihenfolge. ") * 8
    cfg = FiltersConfig(by_lang={"de": Thresholds(stop_words=["die", "der", "und", "in"], min_stop_words=3)})
    step = HeuristicFilterStep(cfg)
    de = _doc(german)
    de["annotations"] = {"normalize": {"script": "other"}, "langid": {"lang": "de"}}
    fr = _doc(german)
    fr["annotations"] = {"normalize": {"script": "other"}, "langid": {"lang": "fr"}}
    plain = _doc(german)
    plain["annotations"] = {"normalize": {"script": "other"}}  # langid off: English rules, as before
    reasons = step.apply([de, fr, plain])
    assert de["annotations"]["filters"]["rules"] == "by_lang.de" and de["annotations"]["filters"]["stop_words"] == 4
    assert fr["annotations"]["filters"]["stop_words"] is None  # no list for fr: the rule does not apply
    assert plain["annotations"]["filters"]["rules"] == "default" and reasons[2] == "gopher_stop_words"
    assert reasons[0] != "gopher_stop_words" and reasons[1] != "gopher_stop_words"
    zh = _doc(ZH * 3)
    zh["annotations"] = {"normalize": {"script": "cjk"}, "langid": {"lang": "zh"}}
    step.apply([zh])
    assert zh["annotations"]["filters"]["rules"] == "cjk"


def test_document_language_prefers_langid_then_the_cjk_share_heuristic():
    doc = _doc("x")
    assert document_language(doc, {"cjk": "zh"}, "en") == "en"
    doc["annotations"] = {"normalize": {"script": "cjk"}}
    assert document_language(doc, {"cjk": "zh"}, "en") == "zh"
    doc["annotations"]["langid"] = {"lang": "ja"}
    assert document_language(doc, {"cjk": "zh"}, "en") == "ja"


def test_accuracy_on_real_text_by_script(identifier):
    """The bar on the shared sample (every 7th document here; the full set in benchmarks/bench_langid.py):
    >= 0.99 per language on documents whose letters are >= 80% of the label's script."""
    if not SAMPLE.exists():
        pytest.skip("../shared/corpora is not present")
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as fh:
        records = [json.loads(line) for i, line in enumerate(fh) if i % 7 == 0]
    texts = [normalize_text(r["text"], NormalizeConfig()) for r in records]
    ratios = [cjk_ratio(t) for t in texts]
    results = identifier.identify(texts, ratios)
    for lang, in_script in (("en", lambda r: r <= 0.2), ("zh", lambda r: r >= 0.8)):
        hits = [res["lang"] == lang for rec, res, r in zip(records, results, ratios) if rec["lang"] == lang
                and in_script(r)]
        assert len(hits) > 300 and sum(hits) / len(hits) >= 0.99, (lang, sum(hits), len(hits))
