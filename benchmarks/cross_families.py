"""Junk that reads well sentence by sentence (issue 39): the four classes an independent
test found the detector weak on, each with a development generator and a different
held-out generator, made from real text of ``../shared/data`` (the sentences and words are
people's; only the splicing is ours).

==========================  ===========================  ==================================
class                       development (``DEV_KINDS``)  held out (``HELD_OUT_KINDS``)
==========================  ===========================  ==================================
sentences of other docs     ``spliced_pairs``: the       ``spliced_sentences``: every
                            paragraphs of two documents  sentence from another document
                            alternate
garbled translation         ``local_swaps``: adjacent    ``garbled_translation``: a third
                            words swapped (p 0.4)        of the words replaced by words of
                                                         other documents, same language
policy boilerplate          ``cookie_policy``: sentences ``terms_policy``: sentences of
(no repeated line)          of a cookie-notice bank      a terms/privacy-rights bank
a language per sentence     ``two_languages``: two       ``language_per_sentence``: each
                            languages alternate          sentence another language
==========================  ===========================  ==================================

The documents spliced are coherent ones (article bodies, WARC pages, book chunks): the
Leipzig "documents" of the normal class are themselves unrelated sentences of one
language, so the first class is measured against the coherent sources only (a detector
that finds them cannot tell them apart, and should not be asked to).
"""

from __future__ import annotations

import random
import re
from typing import Sequence

from pipelines.reference_corpus import paragraphs

DEV_KINDS = ("spliced_pairs", "local_swaps", "cookie_policy", "two_languages")
HELD_OUT_KINDS = ("spliced_sentences", "garbled_translation", "terms_policy", "language_per_sentence")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])\s*")  # CJK full stops need no space after them

_COOKIES = (
    "We use cookies to improve your experience on our website.",
    "By continuing to browse, you agree to our use of cookies.",
    "Some cookies are essential for the site to function properly.",
    "Analytics cookies help us understand how visitors interact with the site.",
    "You can change your cookie preferences at any time in the settings.",
    "Advertising cookies may be set by our partners to build a profile of your interests.",
    "Functional cookies remember choices you make, such as your language or region.",
    "If you disable cookies, some features of this website may not work as intended.",
    "Third-party cookies are placed by services that appear on our pages.",
    "Session cookies are deleted when you close your browser.",
    "Persistent cookies remain on your device until they expire or you delete them.",
    "Click Accept All to consent to all cookies, or Manage Settings to choose.",
    "Strictly necessary cookies cannot be switched off in our systems.",
    "Performance cookies allow us to count visits and traffic sources.",
    "For more information, please read our Cookie Policy.",
    "We never sell the information collected through cookies.",
    "Your consent applies to the following domains.",
    "Cookie settings can also be managed through your browser.",
    "Targeting cookies are used to deliver relevant advertisements.",
    "Reject non-essential cookies to continue with only the necessary ones.",
)
_TERMS = (
    "These Terms of Service govern your access to and use of the Service.",
    "By creating an account you confirm that you are at least 16 years old.",
    "You have the right to request access to the personal data we hold about you.",
    "You may ask us to rectify or erase your personal data at any time.",
    "We process personal data on the basis of legitimate interest or your consent.",
    "The data controller responsible for your information is the operator of this site.",
    "You may withdraw your consent without affecting the lawfulness of prior processing.",
    "We retain personal data only for as long as necessary for the purposes set out here.",
    "You have the right to lodge a complaint with a supervisory authority.",
    "We may update this Privacy Notice from time to time and will post the changes here.",
    "Any dispute arising from these Terms shall be governed by the laws of the jurisdiction.",
    "The Service is provided on an as-is and as-available basis without warranties.",
    "In no event shall the Company be liable for indirect or consequential damages.",
    "We may suspend or terminate your account if you breach these Terms.",
    "Data may be transferred to countries outside the European Economic Area.",
    "Appropriate safeguards such as standard contractual clauses are in place.",
    "To exercise your rights, contact our Data Protection Officer by email.",
    "We do not knowingly collect information from children.",
    "All trademarks remain the property of their respective owners.",
    "Your continued use of the Service constitutes acceptance of the revised Terms.",
)


def sentences(text: str) -> list[str]:
    """The sentences of ``text``: its lines cut after ., !, ? (and their CJK forms)."""
    return [s.strip() for line in text.splitlines() for s in _SENTENCE.split(line) if len(s.strip()) > 1]


def _spliced_pairs(rng: random.Random, coherent: list[str]) -> str:
    a, b = rng.sample(coherent, 2)
    pa, pb = [p for p in a.split("\n") if p.strip()], [p for p in b.split("\n") if p.strip()]
    out = []
    for i in range(max(len(pa), len(pb))):
        out.extend(p[i] for p in (pa, pb) if i < len(p))
    return "\n".join(out[:24])


def _spliced_sentences(rng: random.Random, coherent: list[str]) -> str:
    picked = []
    for doc in rng.sample(coherent, min(len(coherent), rng.randint(8, 20))):
        found = [s for s in sentences(doc) if len(s) > 30]
        if found:
            picked.append(rng.choice(found))
    return paragraphs(picked, rng)


def _local_swaps(rng: random.Random, clean: list[str]) -> str:
    out = []
    for para in rng.choice(clean).split("\n"):
        words, i = para.split(), 0
        while i + 1 < len(words):
            if rng.random() < 0.4:
                words[i], words[i + 1] = words[i + 1], words[i]
                i += 2
            else:
                i += 1
        out.append(" ".join(words))
    return "\n".join(out)


def _garbled_translation(rng: random.Random, by_language: dict[str, list[str]]) -> str:
    lang = rng.choice(sorted(by_language))
    docs = by_language[lang]
    base = rng.choice(docs)
    vocabulary = [w for d in rng.sample(docs, min(len(docs), 6)) if d is not base for w in d.split()]
    if not vocabulary or " " not in base:  # unsegmented scripts: replace characters instead
        chars = [c for d in docs for c in d if c.strip()]
        return "".join(rng.choice(chars) if c.strip() and rng.random() < 0.33 else c for c in base)
    return "\n".join(" ".join(rng.choice(vocabulary) if rng.random() < 0.33 else w for w in para.split())
                     for para in base.split("\n"))


def _policy(rng: random.Random, bank: Sequence[str]) -> str:
    return paragraphs(rng.sample(list(bank), rng.randint(10, len(bank))), rng)


def _mixed_languages(rng: random.Random, by_language: dict[str, list[str]], languages: int) -> str:
    langs = rng.sample(sorted(by_language), languages)
    picked = []
    for i in range(rng.randint(8, 16)):
        lang = langs[i % len(langs)] if languages == 2 else rng.choice(sorted(by_language))
        found = sentences(rng.choice(by_language[lang]))
        if found:
            picked.append(rng.choice(found))
    return paragraphs(picked, rng)


def planted_cross(kind: str, rng: random.Random, coherent: list[str], clean: list[str],
                  by_language: dict[str, list[str]]) -> str:
    """A document of one of ``DEV_KINDS`` or ``HELD_OUT_KINDS``: ``coherent`` are whole
    documents (articles, pages, book chunks), ``clean`` any normal text, ``by_language``
    normal documents per language."""
    if kind == "spliced_pairs":
        return _spliced_pairs(rng, coherent)
    if kind == "spliced_sentences":
        return _spliced_sentences(rng, coherent)
    if kind == "local_swaps":
        return _local_swaps(rng, clean)
    if kind == "garbled_translation":
        return _garbled_translation(rng, by_language)
    if kind == "cookie_policy":
        return _policy(rng, _COOKIES)
    if kind == "terms_policy":
        return _policy(rng, _TERMS)
    if kind == "two_languages":
        return _mixed_languages(rng, by_language, 2)
    if kind == "language_per_sentence":
        return _mixed_languages(rng, by_language, len(by_language))
    raise ValueError(f"unknown kind {kind!r}")
