"""Quality rules per language (issue 18, item 8): segmentation, stop words, fitted
thresholds chosen by the document's language, the script fallback, the clean default."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from benchmarks import fit_language_rules
from tests.conftest import shared
from transforms.clean.clean import CleanConfig, LangIdConfig, select
from transforms.clean.language_rules import (
    LANGUAGE_RULES_FILE,
    document_rules,
    fit_map,
    fit_stop_words,
    is_word,
    mapped,
    profile,
    rules_for,
    tables,
)
from transforms.clean.rules import GopherQualityRules, QualityRules, family_failure
from transforms.clean.segment import char_words, dominant_script, merged_spans, segmenter, segmenter_name, words
from transforms.clean.signals import STOP_WORDS, compute_signals, count_sentences
from transforms.doc import Doc

# Article 1 of the Universal Declaration of Human Rights in Thai (the UN's translation).
THAI = ("มนุษย์ทั้งหลายเกิดมามีอิสระและเสมอกันในเกียรติศักด์และสิทธิ "
        "ต่างมีเหตุผลและมโนธรรม และควรปฏิบัติต่อกันด้วยเจตนารมณ์แห่งภราดรภาพ")


def words_of(lang: str):
    return segmenter(segmenter_name(lang))


def leipzig(lang: str) -> list[str]:
    return shared("langid", "lingua_sentences", f"{lang}.txt").read_text(encoding="utf-8").splitlines()


def document(lang: str, start: int = 0, count: int = 10) -> str:
    """Ten real sentences, two per line (no space between Chinese/Japanese sentences)."""
    lines = leipzig(lang)[start:start + count]
    joiner = "" if lang in ("zh", "ja") else " "
    return "\n".join(joiner.join(lines[i:i + 2]) for i in range(0, len(lines), 2))


def test_jieba_segments_real_chinese():
    sentence = leipzig("zh")[0]  # 102年度彰化县劳工运动会暨园游会于12月1日(星期日)上午在县立体育场...
    got = words(sentence, "zh")
    assert "运动会" in got and "体育场" in got and "劳工" in got
    han = sum("\u4e00" <= c <= "\u9fff" for c in sentence)
    text = "".join(leipzig("zh")[:200])
    n = len(words(text, "zh"))
    assert 0.4 * len(text) < n < 0.8 * len(text)  # ~1.6 characters per word, not 1, not whole lines
    assert len(got) < han


def test_character_fallback_on_real_japanese():
    sentence = leipzig("ja")[1]  # クロノたちが13年ぶりに再会！
    assert sentence.startswith("クロノたちが13年ぶりに再会")
    got = words(sentence, "ja")
    assert got[:6] == ["クロノ", "た", "ち", "が", "13", "年"]  # a Katakana run is one word
    assert segmenter_name("ja") == "chars" and char_words("abc 漢字") == ["abc", "漢", "字"]


def test_newmm_segments_thai():
    got = words(THAI, "th")
    assert got[:4] == ["มนุษย์", "ทั้งหลาย", "เกิด", "มา"]
    assert 15 <= len(got) <= 30 and " " not in got


def test_kiwi_segments_korean_into_morphemes_with_their_particles_apart():
    sentence = leipzig("ko")[0]  # 북핵외교를 전담하는 별도조직인 한반도평화교섭본부가 있어 ...
    got = words(sentence, "ko")
    assert got[:3] == ["북핵", "외교", "를"]  # the object particle is a word of its own
    assert "한반도평화교섭본부" in got and "가" in got and got[-1] == "."
    assert "".join(got) == "".join(sentence.split())  # every character once, none lost
    assert len(got) > 2 * len(sentence.split())
    assert words("외교부입니다.", "ko") == ["외교부", "입니다", "."]  # 이 + ᆸ니다 overlap: one word
    assert segmenter_name("ko") == "kiwi" and segmenter_name("", "Hang") == "kiwi"
    number = "1" * 5000  # a long number is one word, in no time
    assert words(f"가격은 {number}원", "ko") == ["가격", "은", number, "원"]
    assert words("", "ko") == [] and words(" \n ", "ko") == []


def test_merged_spans():
    assert merged_spans([(0, 2), (2, 3), (3, 3), (3, 4), (3, 6), (5, 7), (8, 9)]) == [(0, 2), (2, 3), (3, 7), (8, 9)]
    assert merged_spans([(4, 4)]) == [] and merged_spans([(0, 5), (1, 2)]) == [(0, 5)]


def test_dominant_script():
    assert dominant_script(leipzig("ja")[1]) == "Kana"  # Kana wins over Han in Japanese
    assert dominant_script(leipzig("zh")[0]) == "Hani"
    assert dominant_script(leipzig("ru")[0]) == "Cyrl" and dominant_script(THAI) == "Thai"
    assert dominant_script("12345 !!!") == ""


def test_stop_words_are_the_documents_language():
    assert profile("en", "").stop_words == STOP_WORDS  # Gopher's eight, unchanged
    german = profile("de", "")
    assert {"der", "die", "und"} <= german.stop_words and "the" not in german.stop_words
    assert {"的", "是"} <= profile("zh", "").stop_words and "の" in profile("ja", "").stop_words
    assert {"를", "의", "은", "는"} <= profile("ko", "").stop_words  # particles, apart from their words
    text = document("de")
    assert compute_signals(text, None, german.stop_words).stop_words >= 5
    assert compute_signals(text).stop_words == 0  # English stop words: a German text has none


def test_cjk_and_danda_sentences_end():
    assert count_sentences("今日は晴れ。明日は雨！本当？「はい。」") == 4
    assert count_sentences("यह एक वाक्य है। यह दूसरा है।") == 2
    hindi = compute_signals("यह एक वाक्य है।\nयह दूसरा वाक्य है।")
    assert hindi.fineweb_line_punct_ratio == 1.0 and hindi.c4_sentences == 2


def test_thresholds_follow_the_documents_language():
    rules = QualityRules()
    data = json.loads(LANGUAGE_RULES_FILE.read_text(encoding="utf-8"))["languages"]
    zh = rules_for(rules, "zh")
    a, b = data["zh"]["maps"]["gopher_quality.max_mean_word_length"]
    assert zh.gopher_quality.max_mean_word_length == pytest.approx(a + b * 10.0, abs=1e-4)
    assert zh.gopher_quality.max_mean_word_length < 4 < rules.gopher_quality.max_mean_word_length
    assert rules_for(rules, "de").gopher_quality.max_mean_word_length > 10  # German words are longer
    assert zh.c4 == rules.c4 and zh.gopher_quality.min_words == 50  # language-neutral rules stay
    assert document_rules(rules, profile("en", "")) == rules  # (rules_for is cached: an equal object)
    assert document_rules(rules, profile("zh", "")) == zh
    # a threshold set in the config is read as the English one and mapped
    custom = QualityRules(gopher_quality=GopherQualityRules(max_mean_word_length=12.0, min_mean_word_length=None))
    assert rules_for(custom, "zh").gopher_quality.max_mean_word_length == pytest.approx(a + b * 12.0, abs=1e-4)
    assert rules_for(custom, "zh").gopher_quality.min_mean_word_length is None  # off stays off
    assert mapped(0.5, (-2.0, 1.0)) == 0.0  # clipped at 0


def test_a_language_without_a_table_falls_back_by_script():
    cantonese = profile("yue", leipzig("zh")[0])
    assert (cantonese.table, cantonese.segmenter, cantonese.stop_words) == ("zh", "jieba", frozenset())
    assert cantonese.fallback == "Hani script default"
    assert document_rules(QualityRules(), cantonese).gopher_quality.min_stop_words is None
    # languages lid.176 emits that have no table (no sentences to fit them on), by script
    galician = profile("gl", "Todos os seres humanos nacen libres e iguais en dignidade e dereitos.")
    assert (galician.table, galician.segmenter) == ("", "whitespace")
    assert galician.fallback == "Latn script default: configured thresholds"
    tatar = profile("tt", "Усе людзі нараджаюцца свабоднымі і роўнымі ў сваёй годнасці і правах.")  # Cyrillic text
    assert (tatar.table, tatar.fallback) == ("ru", "Cyrl script default")
    thai_script = profile("xx", THAI)
    assert (thai_script.table, thai_script.segmenter, thai_script.punctuation) == ("th", "newmm", False)
    assert thai_script.fallback == "Thai script default, no punctuation rules"
    assert (profile("xx", "Όλοι οι άνθρωποι γεννιούνται ελεύθεροι").table, profile("yi", "כל מענטשן").table) == ("el", "he")
    thai = profile("th", THAI)  # its own table (fitted with --extra-sentences), no punctuation rules
    assert (thai.table, thai.segmenter, thai.punctuation, thai.fallback) == ("th", "newmm", False, "")
    assert {"ที่", "และ", "ใน"} <= thai.stop_words
    assert "gl" not in tables() and "ru" in tables() and "fi" in tables()


def test_thai_lao_and_myanmar_are_not_judged_by_sentence_punctuation():
    # Thai separates sentences with a space and ends them with no mark: UDHR article 1, two lines
    text = THAI.replace(" ", "\n", 1)
    signals = compute_signals(text, words_of("th"))
    assert signals.c4_sentences == 0 and signals.fineweb_line_punct_ratio == 0.0
    rules = QualityRules()
    thai = document_rules(rules, profile("th", text))
    assert (thai.c4.min_sentences, thai.fineweb.min_line_punct_ratio, thai.c4.max_dropped_lines_frac) == (None, None, None)
    assert thai.fineweb.max_dup_line_char_ratio == rules.fineweb.max_dup_line_char_ratio  # the others stay
    assert thai.gopher_quality.min_words == rules.gopher_quality.min_words
    # the configured rules drop it for its punctuation, Thai's do not
    assert family_failure(signals, rules.c4)[0] == "c4_sentences"
    assert family_failure(signals, rules.fineweb)[0] == "fineweb_line_punct_ratio"
    assert family_failure(signals, thai.c4) is None and family_failure(signals, thai.fineweb) is None
    dropped_lines = QualityRules(c4=dataclasses.replace(rules.c4, max_dropped_lines_frac=0.5))
    assert document_rules(dropped_lines, profile("th", text)).c4.max_dropped_lines_frac is None
    for lang, text_ in (("lo", "ມະນຸດທຸກຄົນເກີດມາມີສິດເສລີພາບ"), ("my", "လူတိုင်းသည် တူညီ လွတ်လပ်သော"),
                        ("xx", THAI)):  # by language code, or by the script of an unknown one
        assert not profile(lang, text_).punctuation, lang
    assert profile("km", "មនុស្សទាំងអស់កើតមកមានសេរីភាព").punctuation  # Khmer ends sentences with khan
    assert all(profile(lang, "").punctuation for lang in ("en", "zh", "ja", "ko", "hi"))
    assert rules_for(rules, "", True, False).c4.min_sentences is None
    assert rules_for(rules, "", True, True).c4.min_sentences == 5


def test_khmer_khan_ends_lines_and_sentences():
    khmer = "មនុស្សទាំងអស់កើតមកមានសេរីភាព។ គេមានវិចារណញ្ញាណ។\nបន្ទាត់ទីពីរ៕"
    assert count_sentences(khmer) == 3
    assert compute_signals(khmer).fineweb_line_punct_ratio == 1.0


def _doc(lang: str, text: str, lang_rules: bool = True) -> Doc:
    prof = profile(lang, text) if lang_rules else None
    signals = compute_signals(text) if prof is None else compute_signals(text, prof.segment(), prof.stop_words)
    return Doc(id=lang, url="", text=text, source="t", fetched_at="", lang=lang, lang_score=0.99, signals=signals)


def test_the_default_applies_rules_to_every_language():
    cfg = CleanConfig(langid=LangIdConfig(model="lid.ftz", languages=()))
    assert cfg.rules_languages == () and cfg.language_rules
    for lang in ("de", "zh", "ja", "ru", "hi"):
        assert select(_doc(lang, document(lang)), cfg, None) is None, lang
    spam = "\n".join(["记住QQ215138693"] * 3 + leipzig("zh")[:8])
    assert select(_doc("zh", spam), cfg, None)[0] == "fineweb_dup_line_char_ratio"
    german = profile("de", "").stop_words  # a German text with its stop words taken out
    stripped = "\n".join(" ".join(w for w in line.split() if w.lower() not in german)
                         for line in document("de").splitlines())
    assert select(_doc("de", stripped), cfg, None)[0] == "gopher_stop_words"
    verdict = select(_doc("yue", spam), cfg, None)
    assert verdict[1].endswith("[yue: rules of zh, Hani script default]")
    assert select(_doc("gl", "Todos os seres humanos nacen libres."), cfg, None)[1].endswith(
        " [gl: Latn script default: configured thresholds]")
    # language_rules off: English words and stop words for German, as before
    old = CleanConfig(langid=LangIdConfig(model="lid.ftz", languages=()), language_rules=False)
    assert select(_doc("de", document("de"), lang_rules=False), old, None)[0] == "gopher_stop_words"
    assert select(_doc("de", document("de"), lang_rules=False), CleanConfig(
        langid=LangIdConfig(model="lid.ftz", languages=()), rules_languages=("en",)), None) is None


def test_fit_map_and_stop_word_fit():
    english = np.linspace(0.0, 1.0, 101)
    assert fit_map(english, 2 * english + 1, "max") == pytest.approx((1.0, 2.0))
    assert fit_map(english, 2 * english + 1, "min") == pytest.approx((1.0, 2.0))
    zeros = np.zeros(100)
    assert fit_map(zeros, np.linspace(0.0, 0.2, 101), "max") == pytest.approx((0.19, 1.0))  # shift
    assert is_word("में") and is_word("l'") is False and not is_word("12") and not is_word("，")
    words_ = ["a"] * 50 + ["b"] * 30 + ["c"] * 10 + ["d"] * 5 + ["e"] * 5
    assert fit_stop_words(words_, 0.85) == ["a", "b", "c", "d"]  # at least four
    assert fit_stop_words(words_, 0.97) == ["a", "b", "c", "d", "e"]


def test_committed_table_is_the_fit_of_the_shared_data():
    shared("langid", "lingua_sentences", "en.txt")
    text = json.dumps(fit_language_rules.fit(), ensure_ascii=False, indent=1, sort_keys=True) + "\n"
    assert LANGUAGE_RULES_FILE.read_text(encoding="utf-8") == text


def test_extra_sentences_add_the_languages_shared_lacks_and_lid_can_emit(tmp_path):
    german = shared("langid", "lingua_sentences", "de.txt").read_text(encoding="utf-8")
    for name in ("nb", "zu", "de"):  # Bokmål (lid.176: no), Zulu (not in lid.176), German (in shared)
        (tmp_path / f"{name}.txt").write_text(german, encoding="utf-8")
    (tmp_path / "notes.md").write_text("not a sentence file")
    assert fit_language_rules.extra_languages(tmp_path) == ["no"]
    assert fit_language_rules.sentences("no", "fit", tmp_path) == fit_language_rules.sentences("de", "fit")
    with pytest.raises(ValueError, match="no <language>.txt sentence files"):
        fit_language_rules.extra_languages(tmp_path / "notes.md")
    # the committed extra tables are carried as they are, each with its file's hash
    extras = fit_language_rules.committed_extras()
    assert {"th", "el", "he", "no", "fi"} <= set(extras) and not set(extras) & set(fit_language_rules.languages())
    assert all(len(e["extra_sentences_sha256"]) == 64 for e in extras.values())
    with pytest.raises(SystemExit) as refused:
        fit_language_rules.main(["--extra-sentences", str(tmp_path / "missing")])
    assert refused.value.code == 2
