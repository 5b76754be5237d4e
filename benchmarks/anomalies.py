"""An anomaly-detection test set: real clean text with planted anomalies of six kinds.

Clean documents are ~3 KB chunks (cut at paragraph boundaries) of the public-domain
books in ``../shared/data/text``. Anomalies are planted by seeded generators: gibberish,
repeated boilerplate, keyword spam, mojibake (real text encoded UTF-8, decoded cp1252),
code and log dumps (real Python source of the standard library; generated server logs),
and link lists.
"""

from __future__ import annotations

import glob
import os
import random
import sysconfig
from pathlib import Path

KINDS = ("gibberish", "boilerplate", "keyword_spam", "mojibake", "code", "logs", "links")
BOOKS = ("pg1342_pride_and_prejudice.txt", "pg2701_moby_dick.txt", "botchan.txt",
         "tinyshakespeare_input.txt")
_LETTERS = "etaoinshrdlcumwfgypbvkjxqz"
_BOILER = ("Subscribe to our newsletter for the latest updates. Click here to accept cookies. "
           "Copyright 2024 All rights reserved. Privacy Policy | Terms of Use | Contact Us\n")
_SPAM = ("cheap", "best", "price", "buy", "online", "discount", "casino", "loans", "free",
         "shipping", "viagra", "replica", "watches", "deal", "sale", "bonus", "crypto", "win")
_TYPOGRAPHY = {"'": "\u2019", '"': "\u201c", "--": "\u2014", "e ": "\u00e9 "}


def clean_chunks(text_dir: Path, size: int = 3000) -> list[str]:
    """~``size``-character chunks of the books, cut at blank lines."""
    chunks: list[str] = []
    for name in BOOKS:
        path = text_dir / name
        if not path.exists():
            continue
        current = ""
        for para in path.read_text(encoding="utf-8", errors="replace").split("\n\n"):
            current += para.strip() + "\n\n"
            if len(current) >= size:
                chunks.append(current.strip())
                current = ""
    return chunks


def _gibberish(rng: random.Random, size: int) -> str:
    words = ["".join(rng.choice(_LETTERS) for _ in range(rng.randint(2, 9))) for _ in range(size // 6)]
    return " ".join(words)


def _mojibake(rng: random.Random, clean: list[str]) -> str:
    text = rng.choice(clean)
    for plain, fancy in _TYPOGRAPHY.items():
        text = text.replace(plain, fancy)
    return text.encode("utf-8").decode("cp1252", errors="replace")


def _code(rng: random.Random, size: int) -> str:
    files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))
    source = Path(rng.choice(files)).read_text(encoding="utf-8", errors="replace")
    start = rng.randrange(max(1, len(source) - size))
    return source[start:start + size]


def _logs(rng: random.Random, size: int) -> str:
    lines = []
    while sum(map(len, lines)) < size:
        lines.append(f"2024-05-{rng.randint(1, 28):02d} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:"
                     f"{rng.randint(0, 59):02d},{rng.randint(0, 999):03d} {rng.choice(['INFO', 'WARN', 'ERROR'])} "
                     f"[worker-{rng.randint(1, 16)}] GET /api/v1/items?id={rng.randint(1, 99999)} "
                     f"{rng.choice([200, 200, 404, 500])} {rng.randint(1, 900)}ms")
    return "\n".join(lines)


def _links(rng: random.Random, size: int) -> str:
    lines = []
    while sum(map(len, lines)) < size:
        slug = "-".join(rng.choice(_SPAM + ("news", "world", "sport", "tech")) for _ in range(3))
        lines.append(f"https://www.example{rng.randint(1, 50)}.com/{slug}/{rng.randint(1, 9999)}.html")
    return "\n".join(lines)


def planted(kind: str, rng: random.Random, clean: list[str], size: int = 3000) -> str:
    if kind == "gibberish":
        return _gibberish(rng, size)
    if kind == "boilerplate":
        return (_BOILER * (size // len(_BOILER) + 1))[:size]
    if kind == "keyword_spam":
        return " ".join(rng.choice(_SPAM) for _ in range(size // 6))
    if kind == "mojibake":
        return _mojibake(rng, clean)
    if kind == "code":
        return _code(rng, size)
    if kind == "logs":
        return _logs(rng, size)
    if kind == "links":
        return _links(rng, size)
    raise ValueError(f"unknown anomaly kind {kind!r}")


def build(text_dir: Path, per_kind: int = 20, seed: int = 0) -> tuple[list[str], list[str]]:
    """(texts, labels): the clean chunks ("clean") and ``per_kind`` planted of each kind."""
    rng = random.Random(seed)
    clean = clean_chunks(text_dir)
    texts, labels = list(clean), ["clean"] * len(clean)
    for kind in KINDS:
        for _ in range(per_kind):
            texts.append(planted(kind, rng, clean))
            labels.append(kind)
    order = list(range(len(texts)))
    rng.shuffle(order)
    return [texts[i] for i in order], [labels[i] for i in order]


# ---------------------------------------------------------------- families real crawls contain
# (issue 14: held out of the detector's development in benchmarks/bench_anomaly.py)

NEW_KINDS = ("encoded", "placeholder", "word_salad", "markup", "catalog", "tables",
             "seo_template", "char_noise", "error_page")
_LOREM = ("lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "
          "incididunt ut labore et dolore magna aliqua enim ad minim veniam quis nostrud "
          "exercitation ullamco laboris nisi aliquip ex ea commodo consequat duis aute irure "
          "in reprehenderit voluptate velit esse cillum fugiat nulla pariatur excepteur sint "
          "occaecat cupidatat non proident sunt culpa qui officia deserunt mollit anim id est "
          "laborum").split()
_FILLER = ("This is a sample page. Replace this text with your own content.",
           "Click here to edit this text.", "Your content goes here.",
           "Add a description of your product here.", "This is an example of a blog post.",
           "Write something about yourself. Tell visitors who you are.",
           "Edit this paragraph in the page editor.", "Sample text. Sample text. Sample text.",
           "Welcome to your new site! This is your first post.", "Heading goes here",
           "Insert your text here and tell your story.", "Coming soon.")
_ERRORS = ("403 Forbidden", "Access denied", "You don't have permission to access this resource.",
           "Please enable JavaScript and cookies to continue.",
           "Checking your browser before accessing the website.",
           "This process is automatic. Your browser will redirect to your requested content shortly.",
           "Please allow up to 5 seconds...", "DDoS protection by Cloudflare", "Ray ID: {hex}",
           "404 Not Found", "The requested URL was not found on this server.",
           "Apache/2.4.{n} (Ubuntu) Server at www.example{n}.com Port 80", "nginx/1.{n}.0",
           "502 Bad Gateway", "Service Temporarily Unavailable",
           "The server is temporarily unable to service your request due to maintenance downtime.",
           "Verify you are human by completing the action below.", "Enable JavaScript to view this page.",
           "This site can't be reached", "Error 1020", "Sorry, you have been blocked",
           "Request ID: {hex}-{hex}", "Why do I have to complete a CAPTCHA?",
           "Your IP address has been temporarily blocked.", "Back to homepage")
_PRODUCTS = ("Wireless Mouse", "USB-C Cable", "Running Shoes", "Coffee Maker", "LED Bulb",
             "Phone Case", "Yoga Mat", "Water Bottle", "Desk Lamp", "Backpack", "T-Shirt",
             "Bluetooth Speaker", "Garden Hose", "Screwdriver Set", "Face Cream")
_BRANDS = ("Acme", "Nordic", "ProLine", "Zentek", "Urban", "Vivo", "Delta", "Crest")
_CITIES = ("Springfield", "Riverside", "Franklin", "Greenville", "Bristol", "Clinton",
           "Fairview", "Salem", "Madison", "Georgetown", "Arlington", "Ashland", "Dover")
_SERVICES = ("plumber", "roofing contractor", "dentist", "locksmith", "moving company",
             "car accident lawyer", "HVAC repair", "pest control", "wedding photographer")
_SEO = ("Looking for the best {s} in {c}? ", "Our {s} team in {c} is available 24/7. ",
        "We are the number one {s} in {c} and the surrounding area. ",
        "Call now for a free {s} quote in {c}! ", "Affordable {s} {c}, cheap {s} near me. ",
        "Top rated {s} in {c} with hundreds of five star reviews. ",
        "Need a {s}? {c} residents trust us for every {s} job. ")
_CSS = ("{sel}{{margin:0;padding:{n}px;font-family:Arial,sans-serif;color:#{hex}}}",
        "{sel}:hover{{background-color:#{hex};border:1px solid #{hex}}}",
        "@media (max-width:{n}px){{{sel}{{display:none}}}}")
_JS = ("function {f}(e,t){{var n=document.getElementById(\"{f}\");if(!n)return;n.style.display=e?\"block\":\"none\"}}",
       "window.dataLayer=window.dataLayer||[];function gtag(){{dataLayer.push(arguments)}}gtag(\"js\",new Date);",
       "var _{f}={{\"id\":{n},\"token\":\"{hex}\",\"items\":[{n},{n},{n}]}};",
       "$(document).ready(function(){{$(\".{f}\").on(\"click\",function(){{$(this).toggleClass(\"active\")}})}});")
_HTML = ("<div class=\"{f}\" id=\"{f}-{n}\"><span>{w}</span></div>",
         "<a href=\"/{f}/{n}.html\" title=\"{w}\">{w}</a>", "<img src=\"/img/{hex}.png\" alt=\"\">",
         "<li class=\"menu-item menu-item-{n}\"><a href=\"#\">{w}</a></li>",
         "<script type=\"application/ld+json\">{{\"@type\":\"Article\",\"headline\":\"{w}\"}}</script>")


def _fill(template: str, rng: random.Random, words: list[str]) -> str:
    return template.format(sel=rng.choice(("body", ".nav", "#main", ".btn", "h1", "p", ".footer a")),
                           n=rng.randint(1, 999), hex=f"{rng.getrandbits(24):06x}",
                           f=rng.choice(("toggle", "menu", "slider", "popup", "cart", "nav")),
                           w=rng.choice(words) if words else "item")


def _encoded(rng: random.Random, clean: list[str], size: int) -> str:
    import base64
    import zlib

    payload = zlib.compress(rng.choice(clean).encode("utf-8")) + rng.randbytes(size)
    kind = rng.randrange(4)
    if kind == 0:
        body = base64.b64encode(payload).decode()
        return "\n".join(body[i:i + 76] for i in range(0, min(len(body), size), 76))
    if kind == 1:
        return "data:image/png;base64," + base64.b64encode(payload).decode()[:size]
    if kind == 2:
        body = base64.b64encode(payload).decode()[:size]
        lines = "\n".join(body[i:i + 64] for i in range(0, len(body), 64))
        return f"-----BEGIN PGP SIGNATURE-----\n\n{lines}\n-----END PGP SIGNATURE-----"
    return "\n".join(" ".join(payload[i + j:i + j + 4].hex() for j in range(0, 16, 4))
                     for i in range(0, size // 2, 16))


def _placeholder(rng: random.Random, size: int) -> str:
    parts: list[str] = ["Lorem ipsum dolor sit amet, consectetur adipiscing elit."] if rng.random() < 0.5 else []
    while sum(map(len, parts)) < size:
        if rng.random() < 0.6:
            words = [rng.choice(_LOREM) for _ in range(rng.randint(6, 18))]
            parts.append(" ".join(words).capitalize() + ".")
        else:
            parts.append(rng.choice(_FILLER))
        if rng.random() < 0.25:
            parts.append("\n")
    return " ".join(parts).replace(" \n ", "\n").strip()


def _word_salad(rng: random.Random, clean: list[str]) -> str:
    out = []
    for para in rng.choice(clean).split("\n"):
        words = para.split()
        rng.shuffle(words)
        out.append(" ".join(words))
    return "\n".join(out)


def _markup(rng: random.Random, clean: list[str], size: int) -> str:
    words = rng.choice(clean).split()[:200]
    pieces = []
    templates = rng.choice((_CSS, _JS, _HTML, _CSS + _JS + _HTML))
    while sum(map(len, pieces)) < size:
        pieces.append(_fill(rng.choice(templates), rng, words))
    return ("" if rng.random() < 0.5 else "\n").join(pieces)


def _catalog(rng: random.Random, size: int) -> str:
    lines = []
    while sum(map(len, lines)) < size:
        name = f"{rng.choice(_BRANDS)} {rng.choice(_PRODUCTS)} {rng.choice(('S', 'M', 'L', 'XL', '2-pack', '500ml', 'Black', 'Blue'))}"
        price = rng.randint(3, 400) + rng.choice((0.99, 0.49, 0.0))
        extra = rng.choice(("In stock", "Only 3 left", "Out of stock", "Free shipping", "Add to cart"))
        lines.append(rng.choice((f"{name} - SKU {rng.randint(10000, 99999)} - ${price:.2f} - {extra}",
                                 f"{name}\n${price:.2f}\n{extra}",
                                 f"{name} | {rng.randint(1, 5)}.{rng.randint(0, 9)} stars ({rng.randint(1, 999)}) | ${price:.2f}")))
    return "\n".join(lines)


def _tables(rng: random.Random, size: int) -> str:
    kind = rng.randrange(3)
    lines = [("Pos Team P W D L GF:GA Pts", "Date Open High Low Close Volume",
              "Station Date Tmax Tmin Rain Wind")[kind]]
    while sum(map(len, lines)) < size:
        if kind == 0:
            w, d, l = rng.randint(0, 30), rng.randint(0, 12), rng.randint(0, 20)
            lines.append(f"{len(lines)} {rng.choice(_CITIES)} FC {w + d + l} {w} {d} {l} "
                         f"{rng.randint(10, 90)}:{rng.randint(10, 90)} {3 * w + d}")
        elif kind == 1:
            o = rng.uniform(10, 500)
            lines.append(f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} {o:.2f} {o * 1.02:.2f} "
                         f"{o * 0.98:.2f} {o * rng.uniform(0.97, 1.03):.2f} {rng.randint(10000, 9000000)}")
        else:
            lines.append(f"{rng.choice(_CITIES)[:4].upper()}{rng.randint(1, 99):02d} 2023-{rng.randint(1, 12):02d}-"
                         f"{rng.randint(1, 28):02d} {rng.uniform(-5, 35):.1f} {rng.uniform(-15, 20):.1f} "
                         f"{rng.uniform(0, 40):.1f} {rng.randint(0, 90)}")
    return "\n".join(lines)


def _seo_template(rng: random.Random, size: int) -> str:
    service = rng.choice(_SERVICES)
    parts = []
    while sum(map(len, parts)) < size:
        city = rng.choice(_CITIES)
        parts.append("".join(rng.choice(_SEO).format(s=service, c=city) for _ in range(rng.randint(2, 4))).strip())
    return "\n".join(parts)


def _char_noise(rng: random.Random, clean: list[str]) -> str:
    """OCR-like damage: ~15% of the letters replaced, dropped or doubled, spaces lost."""
    confusions = {"e": "c", "l": "1", "o": "0", "i": "!", "a": "@", "s": "5", "n": "m", "t": "f",
                  "h": "b", "r": "n", "m": "rn", "u": "v"}
    out = []
    for ch in rng.choice(clean):
        p = rng.random()
        if ch.isalpha() and p < 0.15:
            choice = rng.random()
            out.append(confusions.get(ch.lower(), ch) if choice < 0.6 else ("" if choice < 0.8 else ch + ch))
        elif ch == " " and p < 0.15:
            continue
        else:
            out.append(ch)
    return "".join(out)


def _error_page(rng: random.Random) -> str:
    lines = [_fill(rng.choice(_ERRORS).replace("{hex}", f"{rng.getrandbits(32):08x}"), rng, [])
             for _ in range(rng.randint(4, 12))]
    return "\n".join(lines)


def planted_new(kind: str, rng: random.Random, clean: list[str], size: int = 3000) -> str:
    """A document of one of ``NEW_KINDS``; ``clean`` is the real text some kinds are made of."""
    if kind == "encoded":
        return _encoded(rng, clean, size)
    if kind == "placeholder":
        return _placeholder(rng, size)
    if kind == "word_salad":
        return _word_salad(rng, clean)
    if kind == "markup":
        return _markup(rng, clean, size)
    if kind == "catalog":
        return _catalog(rng, size)
    if kind == "tables":
        return _tables(rng, size)
    if kind == "seo_template":
        return _seo_template(rng, size)
    if kind == "char_noise":
        return _char_noise(rng, clean)
    if kind == "error_page":
        return _error_page(rng)
    return planted(kind, rng, clean, size)


def sized_documents(data: Path, size: int = 3000) -> list[str]:
    """~``size``-character documents: chunks of the books and runs of the Leipzig web
    sentences of 20 languages (the documents of the clean-stage speed benchmarks)."""
    docs = clean_chunks(data / "text", size)
    for path in sorted((data / "langid" / "lingua_sentences").glob("*.txt")):
        current = ""
        for line in path.read_text(encoding="utf-8").splitlines():
            current += line.strip() + " "
            if len(current) >= size:
                docs.append(current.strip())
                current = ""
    return docs
