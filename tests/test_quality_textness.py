"""Every kept document is judged (the text-ness judge and the policy for unmodelled / unsure languages), and a
quality model knows its language (the card records it; `prepare` refuses a model configured for another one;
`quality score --model` applies it to its own)."""
from __future__ import annotations

import gzip
import json
import random

import pytest
import yaml

from transforms.base import StepConfigError
from transforms.quality.model import QualityTrainConfig, card_languages, train_quality_model
from transforms.quality.step import (DEFAULT_ZH_TRAIN_DATA, QualityConfig, QualityStep, check, decide_document,
                                     resolve_train_data)
from transforms.quality.textness import (_LATIN_CYRILLIC, _VOWEL, FEATURES, HEAD_CHARS, MAX_WINDOWS,
                                        TextnessJudge, mojibake_share, text_windows, textness_features)

REAL = {
    "de": "Für jeden gefundenen Pfad-Bestandteil wird ein Hierarchie-Bestandteil zum Suchpfad hinzugefügt. "
          "Standardmäßig wertet das Programm die Umgebungsvariable des Benutzers aus; außerdem können Verzeichnisse "
          "für die Speicherung von Dateien zugeordnet werden, wenn sie schon existieren.",
    "ru": "Москва является столицей России и крупнейшим городом страны. В городе проживает более двенадцати "
          "миллионов человек. Здесь расположены многочисленные музеи, театры, университеты и библиотеки.",
    "hi": "भारत दक्षिण एशिया में स्थित एक विशाल देश है और जनसंख्या की दृष्टि से दुनिया का सबसे बड़ा देश है। यहाँ अनेक "
          "भाषाएँ बोली जाती हैं और हर राज्य की अपनी संस्कृति, भोजन और परंपराएँ हैं।",
    "ar": "القاهرة هي عاصمة جمهورية مصر العربية وأكبر مدنها من حيث عدد السكان. تقع المدينة على ضفاف نهر النيل في "
          "شمال البلاد، وتعد من أقدم المدن في العالم. تضم القاهرة العديد من المتاحف والمساجد التاريخية.",
    "ja": "各マニュアルページには短い要約文が含まれています。このプログラムはそのマニュアルページの要約内にあるキーワードを"
          "検索します。データベースは定期的に更新されます。インストール方法によりますが、自動的に実行されることもあります。",
    "zh": "软件包管理器会解析软件包的依赖关系，并按照正确的顺序安装它们。如果出现冲突，系统会提示用户确认。"
          "管理员可以在配置文件中指定镜像站点，也可以使用命令行工具更新本地的软件包列表。",
}


def _garbage() -> dict[str, str]:
    rng = random.Random(3)
    return {
        "utf8-as-latin1": REAL["de"].encode("utf-8").decode("latin-1") + " " + REAL["zh"].encode("utf-8").decode(
            "latin-1"),
        "utf8-as-gbk": REAL["ru"].encode("utf-8").decode("gbk", errors="replace"),
        "utf8-as-cp1252": REAL["ja"].encode("utf-8").decode("cp1252", errors="ignore"),
        "keyboard": " ".join("".join(rng.choice("asdfghjklqwrtzxcvbnm") for _ in range(rng.randint(3, 11)))
                             for _ in range(40)),
        "symbols": "".join(rng.choice("#$%&*+=<>|~^@!?/\\[]{}0123456789§°±") for _ in range(300)),
        "boilerplate": "\n".join(["Startseite | Impressum | Datenschutz | Kontakt | Anmelden"] * 20),
    }


def test_mojibake_share_finds_wrong_decodings_and_not_real_text():
    for lang, text in REAL.items():
        assert mojibake_share(text) < 0.2, lang
    for source in ("de", "ru", "zh", "ja"):
        for wrong in ("latin-1", "cp1252", "gbk", "shift_jis", "cp1251"):
            broken = REAL[source].encode("utf-8").decode(wrong, errors="ignore")
            assert mojibake_share(broken) > 0.3, (source, wrong)  # lossy decodings (ignore) lose some


def test_the_shipped_judge_keeps_real_text_of_any_language_and_rejects_garbage():
    judge = TextnessJudge.load()
    threshold = QualityConfig().textness_threshold
    real = judge.score(list(REAL.values()))
    assert (real >= threshold).all(), dict(zip(REAL, real.round(3)))
    garbage = _garbage()
    scores = judge.score(list(garbage.values()))
    assert (scores < threshold).all(), dict(zip(garbage, scores.round(3)))


def test_the_shipped_judge_keeps_long_real_text_and_vietnamese(demo_corpus):
    """Length is no sign of garbage: the demo corpus's long prose (novels, the Bible, Wikipedia, news, Debian's
    documentation: over 3,000 characters each) is text as much as a paragraph is. A judge fitted on short real
    passages beside longer garbage kept under half of them. And a vowel keeps its marks (Vietnamese ư ơ ạ ế)."""
    from transforms.normalize import NormalizeConfig, normalize_text

    judge = TextnessJudge.load()
    threshold = QualityConfig().textness_threshold
    prose = ("austen", "kjv_bible", "enwiki_gensim", "newsgroup_gensim", "lee_news_gensim", "doc_debian", "debian_faq")
    long_docs = [normalize_text(r["text"], NormalizeConfig()) for r in demo_corpus
                 if r["source"] in prose and len(r["text"]) > 3000]
    assert len(long_docs) >= 50
    assert (judge.score(long_docs) >= threshold).mean() >= 0.95
    vi = ("Hà Nội là thủ đô của Việt Nam và là thành phố lớn thứ hai của cả nước. Thành phố nằm bên bờ sông Hồng, "
          "có lịch sử hơn một nghìn năm. Ở đây có nhiều hồ nước, đền chùa và những con phố cổ với các cửa hàng nhỏ.")
    assert judge.score([vi])[0] >= threshold
    share = len(_VOWEL.findall(vi)) / len(_LATIN_CYRILLIC.findall(vi))
    assert 0.35 <= share <= 0.5, share  # ư ơ ạ ế ... counted (without them: 0.30, like a keyboard's runs)
    assert textness_features(vi)[FEATURES.index("vowels")] == 1.0  # saturated: as much a language as any


def test_the_judge_reads_a_long_document_past_its_head(demo_corpus):
    """A long document is judged window by window, weighted by length: garbage after a fluent first screen is not
    waved through by its head, and prose around a listing keeps its share of text."""
    from transforms.normalize import NormalizeConfig, normalize_text

    judge = TextnessJudge.load()
    threshold = QualityConfig().textness_threshold
    prose = next(normalize_text(r["text"], NormalizeConfig()) for r in demo_corpus
                 if r["source"] == "austen" and len(r["text"]) > 2 * HEAD_CHARS)[:2 * HEAD_CHARS]
    rng = random.Random(5)
    mash = "\n".join(" ".join("".join(rng.choice("asdfghjklqwrtzxcvbnm") for _ in range(rng.randint(3, 11)))
                               for _ in range(10)) for _ in range(200))[:3 * HEAD_CHARS]
    assert judge.score([prose[:HEAD_CHARS]])[0] >= threshold
    assert judge.score([prose[:HEAD_CHARS] + "\n" + mash])[0] < threshold  # three quarters garbage
    assert judge.score([prose + "\n" + mash[:HEAD_CHARS // 2]])[0] >= threshold  # a sixth garbage

    windows = text_windows(prose + "\n" + mash)
    assert len(windows) == MAX_WINDOWS and "".join(windows) == (prose + "\n" + mash)[:MAX_WINDOWS * HEAD_CHARS]
    assert all(HEAD_CHARS // 2 <= len(w) <= HEAD_CHARS * 1.1 for w in windows), [len(w) for w in windows]
    assert text_windows(prose[:HEAD_CHARS]) == [prose[:HEAD_CHARS]]


def test_a_ruler_of_equals_signs_is_no_code():
    """A Markdown or reST heading's underline and a mail signature's frame are text layout: counted as ``==``
    operators they made a Usenet post with a framed signature look like code (P(text) 0.09)."""
    code_tokens = FEATURES.index("code_tokens")
    layout = "Installation\n============\n\nRun the installer and follow the prompts.\n" + "=" * 60
    assert textness_features(layout)[code_tokens] == 0.0
    code = "if a == b and c != d:\n    return x <= y"
    assert textness_features(code)[code_tokens] > 0.2


def _doc(i, text, lang, score=0.99):
    return {"id": i, "text": text, "annotations": {"langid": {"lang": lang, "score": score}}}


def test_policy_for_unmodelled_languages_judge_keep_remove():
    """With no model for ru: judge keeps the real text and removes the mojibake (not_text); keep keeps both
    unscored; remove removes both (no_quality_model). The judge's score is written, the threshold decides."""
    broken = REAL["ru"].encode("utf-8").decode("latin-1")
    for policy, expected in (("judge", [None, "not_text"]), ("keep", [None, None]),
                             ("remove", ["no_quality_model", "no_quality_model"])):
        cfg = QualityConfig(unmodelled=policy, models={})
        docs = [_doc(1, REAL["ru"], "ru"), _doc(2, broken, "id", 0.3)]
        assert QualityStep(cfg, {}).apply(docs) == expected, policy
        mine = docs[0]["annotations"]["quality"]
        assert mine["score"] is None and mine["route"] == "unmodelled" and mine["policy"] == policy
        assert ("textness" in mine) == (policy == "judge")
    # a retuned threshold decides again from the annotation, without rescoring
    mine = dict(docs[0]["annotations"]["quality"], policy="judge", textness=0.7)
    assert decide_document(mine, 1, QualityConfig(textness_threshold=0.8)) == "not_text"
    assert decide_document(mine, 1, QualityConfig(textness_threshold=0.6)) is None


@pytest.fixture(scope="module")
def tiny_zh_model(tmp_path_factory) -> str:
    """A small Chinese model (characters), trained in seconds; its card records its language."""
    with gzip.open(resolve_train_data(DEFAULT_ZH_TRAIN_DATA), "rt", encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh][::12]
    cfg = QualityTrainConfig(tokenizer="cjk", order=3, frequent_words=30, max_tokens=64, epoch=3, dim=8,
                             bucket=2000, folds=2, heldout_fraction=0.0, hash_bits=12)
    model, card = train_quality_model(records, cfg, log=lambda _: None)
    path = str(tmp_path_factory.mktemp("zh-model") / "zh.bin")
    model.save(path, card)
    return path


def test_unsure_language_is_judged_as_well(tiny_zh_model):
    """langid names zh unsurely: the zh model scores it and the judge must pass it too (policy unsure: judge);
    with unsure: keep the model alone decides; with remove it goes (language_unsure)."""
    broken = REAL["zh"].encode("utf-8").decode("gbk", errors="replace")
    cfg = QualityConfig(model_lang="zh", model=tiny_zh_model, models={}, threshold=0.0)
    docs = [_doc(1, broken, "zh", 0.2), _doc(2, REAL["zh"], "zh", 0.99)]
    assert QualityStep(cfg, {"zh": tiny_zh_model}).apply(docs) == ["not_text", None]
    assert docs[0]["annotations"]["quality"]["route"] == "unsure"
    assert isinstance(docs[0]["annotations"]["quality"]["score"], float)
    assert "route" not in docs[1]["annotations"]["quality"]  # sure: the model alone
    docs = [_doc(1, broken, "zh", 0.2)]  # the model removes it first: its reason, not the judge's
    assert QualityStep(cfg.model_copy(update={"threshold": 1.0}), {"zh": tiny_zh_model}).apply(docs) == [
        "low_quality"]
    docs = [_doc(1, broken, "zh", 0.2)]
    assert QualityStep(cfg.model_copy(update={"unsure": "keep"}), {"zh": tiny_zh_model}).apply(docs) == [None]
    docs = [_doc(1, broken, "zh", 0.2)]
    assert QualityStep(cfg.model_copy(update={"unsure": "remove"}), {"zh": tiny_zh_model}).apply(docs) == [
        "language_unsure"]


def test_a_model_knows_its_language(tiny_zh_model, tmp_path, capsys):
    """The card records zh; configured as the English model it is refused naming the field (prepare: exit 2);
    as quality.models.zh it is accepted."""
    from cli.main import main

    assert card_languages(tiny_zh_model) == ["zh"]
    with pytest.raises(StepConfigError, match=r"quality\.model: .* trained on zh text .* not en"):
        check(QualityConfig(model=tiny_zh_model, models={}))
    with pytest.raises(StepConfigError, match=r"quality\.models\.en\.model: .* not en"):
        check(QualityConfig(model_lang="de", models={"en": {"model": tiny_zh_model}}))
    check(QualityConfig(models={"zh": {"model": tiny_zh_model}}))  # its own language: accepted
    check(QualityConfig(model_lang="zh", model=tiny_zh_model, models={}))
    source = tmp_path / "docs.jsonl"
    source.write_text(json.dumps({"id": "a", "text": REAL["de"]}) + "\n", encoding="utf-8")
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"name": "wrong", "input": {"paths": [str(source)]},
                                      "output": {"runs_dir": str(tmp_path / "runs")},
                                      "quality": {"model": tiny_zh_model}}), encoding="utf-8")
    assert main(["prepare", str(config), "--runner", "inprocess"]) == 2
    assert "quality.model:" in capsys.readouterr().err


def test_score_with_a_chinese_model_scores_chinese_documents(tiny_zh_model, tmp_path, capsys):
    """`quality score --model zh.bin`: the Chinese documents get the Chinese model's score; a document of
    another language goes to the unmodelled policy (judged), never to the Chinese model."""
    from cli.main import main

    docs = [{"id": "zh1", "text": REAL["zh"]}, {"id": "zh2", "text": REAL["zh"][::-1]},
            {"id": "de", "text": REAL["de"]}]
    source = tmp_path / "docs.jsonl"
    source.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), encoding="utf-8")
    out = tmp_path / "scores.jsonl"
    assert main(["quality", "score", str(source), "--model", tiny_zh_model, "--id-field", "id", "--out", str(out),
                 "--runner", "inprocess", "--workers", "1"]) == 0
    rows = {r["id"]: r for r in map(json.loads, out.read_text(encoding="utf-8").splitlines())}
    assert isinstance(rows["zh1"]["score"], float) and isinstance(rows["zh2"]["score"], float)
    assert "skipped" not in rows["zh1"]
    assert rows["de"]["score"] is None and rows["de"]["route"] == "unmodelled" and rows["de"]["keep"] is True
    assert "scores zh documents (its model card)" in capsys.readouterr().err


def test_stats_and_report_show_what_the_policy_decided_per_language(tmp_path):
    """stats.json's language mix counts, per language, the documents each route/policy kept and removed, with
    the judge's histogram; the report's language table shows them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipelines.prepare import language_mix
    from report.build import language_mix_body
    from runio.layout import RunPaths

    paths = RunPaths(tmp_path)
    paths.docs.mkdir(parents=True)
    paths.removed.mkdir(parents=True)

    def ann(lang, quality):
        return json.dumps({"langid": {"lang": lang, "score": 0.9}, "quality": quality})

    judged = {"score": None, "skipped": "language ru: no quality model (quality.models.ru)", "route": "unmodelled",
              "policy": "judge"}
    kept = [ann("ru", {**judged, "textness": 0.93}), ann("en", {"score": 0.8, "logit": 1.4})]
    removed = [ann("ru", {**judged, "textness": 0.04}), ann("zh", {"score": 0.9, "logit": 2.2, "route": "unsure",
                                                                  "policy": "judge", "textness": 0.1})]
    pq.write_table(pa.table({"annotations": kept}), paths.docs / "part-0.parquet")
    pq.write_table(pa.table({"removed_by": ["quality", "quality"], "annotations": removed}),
                   paths.removed / "part-0.parquet")
    mix = language_mix(paths, ["langid", "quality"])
    quality = mix["quality"]
    assert quality["ru"]["policy"] == {"unmodelled/judge": {"kept": 1, "removed": 1}}
    assert sum(quality["ru"]["textness_histogram"]) == 2 and quality["ru"]["scored"] == 0
    assert quality["zh"]["policy"] == {"unsure/judge": {"removed": 1}} and quality["zh"]["scored"] == 1
    assert "policy" not in quality["en"]
    body = language_mix_body(mix)
    assert "unmodelled/judge: 1 kept, 1 removed" in body and "unsure/judge: 0 kept, 1 removed" in body
