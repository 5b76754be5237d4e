"""Document-level language ID: windows spread over a text, combined by length (issue 18)."""

from __future__ import annotations

import pytest

from models.fasttext_models import LanguageIdentifier, LanguageMix, combine_windows, lid_windows
from tests.conftest import shared
from transforms.clean.clean import LangIdConfig


def sentences(lang: str) -> list[str]:
    path = shared("langid", "lingua_sentences", f"{lang}.txt")
    return [s for s in path.read_text(encoding="utf-8").splitlines() if s.strip()]


def run(lang: str, min_chars: int, skip: int = 0) -> str:
    """Real sentences of ``lang`` in file order, one a line, until ``min_chars`` is reached."""
    out: list[str] = []
    for sentence in sentences(lang)[skip:]:
        out.append(sentence)
        if len("\n".join(out)) >= min_chars:
            break
    return "\n".join(out)


@pytest.fixture(scope="module")
def lid() -> LanguageIdentifier:
    config = LangIdConfig(model=str(shared("models", "lid.176.ftz")))
    return LanguageIdentifier.load(config.model, config.max_chars, config.max_windows)


def test_defaults_are_eight_windows_of_1000_characters():
    config = LangIdConfig(model="lid.176.ftz")
    assert (config.max_chars, config.max_windows) == (1000, 8)
    with pytest.raises(ValueError, match="max_windows must be > 0, got 0"):
        LangIdConfig(model="lid.176.ftz", max_windows=0)


@pytest.mark.parametrize("length,max_windows,count", [
    (0, 8, 1), (999, 8, 1), (1000, 8, 1), (1001, 8, 2), (2500, 8, 3), (8000, 8, 8), (20_000, 8, 8),
    (20_000, 1, 1), (20_000, 3, 3),
])
def test_window_count(length, max_windows, count):
    text = ("word " * (length // 5 + 1))[:length]
    assert len(lid_windows(text, 1000, max_windows)) == count


def test_one_window_is_the_first_characters():
    text = "word " * 4000
    assert lid_windows(text[:1000], 1000, 8) == [text[:1000]]
    assert lid_windows(text, 1000, 1) == [text[:1000]]


def test_windows_cover_the_text_up_to_max_windows_times_max_chars_and_start_on_words():
    text = run("de", 7000)
    windows = lid_windows(text, 1000, 8)
    assert "".join(windows) == text and all(len(w) <= 1000 for w in windows)
    assert all(text[text.index(w) - 1].isspace() for w in windows[1:])


def test_a_long_text_is_sampled_evenly():
    text = "abcdefghi " * 2000  # 20,000 characters: 8 segments of 2,500
    windows = lid_windows(text, 1000, 8)
    starts = [text.index(w[:40], 2500 * i) for i, w in enumerate(windows)]
    assert starts == [0] + [2500 * i for i in range(1, 8)]  # each boundary is just past a space
    assert all(len(w) == 1000 for w in windows)


def test_text_without_spaces_is_cut_where_it_falls():
    text = "汉" * 3000
    assert [len(w) for w in lid_windows(text, 1000, 8)] == [1000, 1000, 1000]


@pytest.mark.parametrize("preds,lengths,mix", [
    ([("en", 0.9)], [1000], LanguageMix("en", 0.9)),  # one window: fastText's answer as it is
    ([("en", 0.9), ("de", 0.8), ("de", 0.6)], [1000, 1000, 500], LanguageMix("de", 0.44, "en", 0.4)),
    ([("en", 1.0), ("de", 0.5), ("de", 0.5)], [1000, 600, 600], LanguageMix("de", 600 / 2200, "en", 1000 / 2200)),
    ([("en", 0.5), ("de", 0.9)], [1000, 1000], LanguageMix("de", 0.45, "en", 0.5)),  # tie: confidence
    ([("en", 0.7), ("de", 0.7)], [1000, 1000], LanguageMix("en", 0.35, "de", 0.5)),  # then the first
    ([("fr", 0.9), ("fr", 0.7), ("fr", 0.8)], [1000, 1000, 1000], LanguageMix("fr", 0.8)),
    ([("fr", 0.9), ("en", 0.3), ("de", 0.9), ("fr", 0.9)], [1000] * 4, LanguageMix("fr", 0.45, "de", 0.25)),
])
def test_windows_combine_by_length(preds, lengths, mix):
    got = combine_windows(preds, lengths)
    assert (got.lang, got.lang2) == (mix.lang, mix.lang2)
    assert got.score == pytest.approx(mix.score) and got.lang2_share == pytest.approx(mix.lang2_share)


def test_english_header_over_a_german_article_is_german_with_english_second(lid):
    header = run("en", 1200)
    text = header + "\n" + run("de", 5000)
    assert lid.predict([text])[0][0] == "en"  # the first 1,000 characters alone say English
    mix, = lid.identify([text])
    assert (mix.lang, mix.lang2) == ("de", "en")
    assert mix.lang2_share == pytest.approx(len(header) / len(text), abs=0.1) and mix.score > 0.65


def test_half_and_half_records_a_share_near_one_half(lid):
    text = run("fr", 2500) + "\n" + run("es", 2500)
    mix, = lid.identify([text])
    assert {mix.lang, mix.lang2} == {"fr", "es"} and mix.lang2_share == pytest.approx(0.5, abs=0.1)


def test_one_language_has_no_second(lid):
    mix, = lid.identify([run("pl", 6000)])
    assert mix == LanguageMix("pl", mix.score) and mix.score > 0.9


def test_short_documents_are_unchanged(lid):
    today = LanguageIdentifier(lid.model, lid.path, lid.sha256, max_chars=1000)
    texts = [run(lang, size, skip) for lang in ("en", "de", "cs", "ja", "sv") for size, skip in
             ((1, 0), (300, 5), (700, 40), (1000, 80))]
    texts = [t[:1000] for t in texts]
    mixes = lid.identify(texts)
    assert [(m.lang, m.score, m.lang2, m.lang2_share) for m in mixes] == \
        [(lang, score, "", 0.0) for lang, score in today.predict(texts)]
