"""The pure core of the extract step: ``extract(html, cfg) -> Extracted``, the main text of an HTML page.

The corpusmill extractor works on Resiliparse's DOM (lexbor, C): every rule below is about the page's structure or
the vocabulary of boilerplate in general use on the web, never about one site:

1. Prune what is never main text: scripts, styles, forms, frames; ``nav``, ``aside``, ``footer`` and a
   ``header`` without the page's heading; ARIA landmarks that are not content (navigation, banner,
   contentinfo, complementary, search, dialog); hidden elements; elements whose class or id names boilerplate
   (menu, breadcrumb, cookie/consent, share/social, related, comments, sidebar/widget, footer, ad/sponsor,
   newsletter/subscribe, pagination: the vocabulary Readability and boilerplate studies list). An element that
   holds most of the page's text is never pruned, whatever its name.
2. Choose the main-content root: a single ``<main>`` / ``role=main`` or ``<article>`` that holds a fair share
   of the text; else the element that gathers the most paragraph text (Readability's scoring: each paragraph,
   list item, cell or code block credits its parent fully and its grandparent half).
3. Inside the root, drop link-dense blocks (lists, tables, divs of three links or more whose text is mostly link
   text: related links, tag clouds, pagers).
4. Text of the root by Resiliparse's ``extract_plain_text`` (block structure kept: paragraphs, headings, list
   items and table rows one a line, ``<pre>`` with its line breaks).

The other two extractors (``resiliparse``, ``trafilatura``) are there to compare and as fallbacks of choice.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import HTMLTree

from transforms.extract.config import ExtractConfig

NO_MAIN_TEXT = "no_main_text"
TOO_SHORT = "too_short_after_extraction"
TOO_LARGE = "html_too_large"
NOT_HTML = "not_html"


@dataclass
class Extracted:
    """What ``extract`` found: the main text, the page's title, and a reason when there is no usable text
    (``no_main_text``, ``too_short_after_extraction``, ``html_too_large``). ``root`` names the element the
    text came from (``main``, ``article``, ``scored:<tag>``, ``body``), for diagnosis."""

    text: str
    title: str
    reason: str | None = None
    root: str = ""
    html_chars: int = 0


# Tags never part of main text (removed before anything else).
_NEVER = ("script, style, noscript, template, svg, iframe, object, embed, canvas, form, button, select, textarea, "
          "input, nav, aside, footer, dialog, menu")
# ARIA roles of landmarks that are not content.
_ROLES = ("[role=navigation], [role=banner], [role=contentinfo], [role=complementary], [role=search], "
          "[role=dialog], [role=alertdialog], [role=menu], [role=menubar], [role=toolbar], [hidden], "
          "[aria-hidden=true]")
# Class/id tokens of boilerplate in general use (whole tokens, or token prefixes for the open families).
_BOILER_TOKENS = {
    "nav", "navbar", "navigation", "menu", "menubar", "breadcrumb", "breadcrumbs", "crumbs", "crumb", "cookie",
    "cookies", "consent", "gdpr", "share", "sharing", "shares", "social", "sns", "related", "recommended",
    "recommend", "comments", "comment", "disqus", "respond", "responses", "replies", "sidebar", "widget",
    "widgets", "footer", "colophon", "copyright", "banner", "advert", "advertisement", "ad", "ads", "adv",
    "sponsor", "sponsored", "promo", "newsletter", "subscribe", "subscription", "signup", "popup", "modal",
    "pagination", "pager", "masthead", "toolbar", "topbar", "skip", "login", "search", "tagcloud", "byline",
    "dateline", "rail", "outbrain", "taboola", "dfp", "yarpp", "trending", "popular", "more-stories",
    "toc", "tags", "trail", "follow", "mailing",
}
_BOILER_PREFIXES = ("comment", "share", "social", "sidebar", "cookie", "breadcrumb", "related", "advert",
                    "sponsor", "newsletter", "subscri", "promo", "popup", "pagination", "widget", "navbar",
                    "footer", "disqus", "recommend")
_BOILER_SUFFIXES = ("nav", "menu", "footer", "sidebar", "banner", "comments")
_TOKEN_SPLIT = re.compile(r"[\s_\-:.]+|(?<=[a-z])(?=[A-Z])")
# Names that mark content: an element so named is not pruned by the vocabulary.
_CONTENT_TOKENS = {"content", "article", "main", "post", "entry", "story", "body", "text", "markdown", "prose"}

_PARAGRAPHS = "p, pre, li, td, dd, blockquote, h2, h3, h4"
_LINK_BLOCKS = "ul, ol, dl, table, div, section, p"


def _boilerplate_name(value: str) -> bool:
    tokens = [t.lower() for t in _TOKEN_SPLIT.split(value) if t]
    if not tokens or any(t in _CONTENT_TOKENS for t in tokens):
        return False
    for t in tokens:
        if t in _BOILER_TOKENS or t.startswith(_BOILER_PREFIXES) or t.endswith(_BOILER_SUFFIXES):
            return True
    return False


def _text_len(node) -> int:
    return len(node.text.strip()) if node is not None else 0


# Resiliparse wraps every DOM node it hands to Python in a cached object (a few microseconds each), and iterating
# its node lists is quadratic: the code below takes node lists by slice (``[:]``) and touches as few nodes as it
# can. The class/id vocabulary is matched on the attribute values found in the HTML source (a regex over the
# string), so only the elements that carry a boilerplate name are ever looked up, by an exact selector.
_ATTR_RES = (re.compile(r"""\bclass=(?:"([^"<>]*)"|'([^'<>]*)'|([^\s"'<>=`]+))"""),
             re.compile(r"""\bid=(?:"([^"<>]*)"|'([^'<>]*)'|([^\s"'<>=`]+))"""))
_NAME_CACHE: dict[str, bool] = {}
_SAFE_VALUE = re.compile(r'^[^\\"\n]*$')
_NEVER_TAGS = frozenset(t.strip() for t in _NEVER.split(","))
# inline elements are never pruned by their name (``<span class="hljs-comment">`` inside code is code)
_INLINE = frozenset(("span", "code", "b", "i", "em", "strong", "sup", "sub", "var", "kbd", "samp", "tt", "small",
                     "mark", "abbr", "time", "wbr", "br", "img"))


def _boilerplate_selector(html: str) -> str:
    """A CSS selector list matching every element whose class or id names boilerplate (exact attribute values,
    found by a regex over the HTML source)."""
    parts = []
    for attr, pattern in zip(("class", "id"), _ATTR_RES):
        for value in {dq or sq or bare for dq, sq, bare in pattern.findall(html)}:
            verdict = _NAME_CACHE.get(value)
            if verdict is None:
                verdict = _boilerplate_name(value)
                if len(_NAME_CACHE) < 100_000:
                    _NAME_CACHE[value] = verdict
            if verdict and _SAFE_VALUE.match(value):
                parts.append(f'[{attr}="{value}"]')
    return ", ".join(parts)


def _prune(root, html: str, total: int, cfg: ExtractConfig) -> None:
    """Remove what is never main text (step 1), in one selector query. ``total``: the text length of the whole
    body; an element holding more than half of it is kept whatever its name or role (a site that names its
    wrapper "main-nav"), and inline elements are never pruned by name."""
    guard = max(total // 2, 1)
    never = set(_NEVER_TAGS)
    for sel, keep in (("table", cfg.keep_tables), ("ul", cfg.keep_lists), ("ol", cfg.keep_lists),
                      ("dl", cfg.keep_lists), ("pre", cfg.keep_code)):
        if not keep:
            never.add(sel)
    selector = ", ".join(never) + ", header, " + _ROLES
    names = _boilerplate_selector(html)
    if names:
        selector += ", " + names
    for el in root.query_selector_all(selector)[:]:
        if el.parent is None:  # inside one removed already
            continue
        tag = el.tag
        if tag in never:
            el.decompose()
        elif tag == "header":
            if el.query_selector("h1") is None:
                el.decompose()
        elif tag not in _INLINE and _text_len(el) < guard:
            el.decompose()


def _choose_root(body, total: int):
    """The main-content root (step 2) and how it was chosen."""
    for selector, how in (("main, [role=main]", "main"), ("article", "article")):
        found = body.query_selector_all(selector)[:]
        if len(found) == 1 and _text_len(found[0]) >= 0.3 * total:
            return found[0], how
    scores: dict = {}
    for el in body.query_selector_all(_PARAGRAPHS)[:]:
        text = el.text
        n = len(text)
        if n < 25:
            continue
        weight = n + 10 * (text.count(",") + text.count("，") + text.count("、"))
        parent = el.parent
        if parent is None:
            continue
        scores[parent] = scores.get(parent, 0) + weight
        grand = parent.parent
        if grand is not None and grand.tag != "html":
            scores[grand] = scores.get(grand, 0) + weight / 2
    if not scores:
        return body, "body"
    best = max(scores, key=scores.get)
    # a candidate that is a list or a table is part of something larger: its container holds the rest
    while best.tag in ("ul", "ol", "dl", "li", "table", "tbody", "tr", "td", "blockquote") and best.parent is not None:
        best = best.parent
    # go up while the parent adds little but a heading (the title sits next to the text's container)
    parent = best.parent
    while parent is not None and parent.tag not in ("body", "html"):
        own, up = _text_len(best), _text_len(parent)
        if up > own * 1.15 + 200:
            break
        best, parent = parent, parent.parent
    # the text continues in siblings of the same kind (sections of a manual, posts of a thread): their parent
    parent = best.parent
    if parent is not None and parent.tag not in ("body", "html"):
        floor = 0.2 * scores.get(best, 0)
        tag = best.tag
        if any(sib is not best and sib.tag == tag and scores.get(sib, 0) >= floor
               for sib in parent.children[:]):
            best = parent
    return best, f"scored:{best.tag}"


_LINK_RE = re.compile(r"<a\b[^>]*>(.*?)</a>", re.S | re.I)
_TAG_RE = re.compile(r"<[^>]*>")


def _drop_link_dense(root, threshold: float) -> None:
    """Step 3: lists and tables of three links or more whose text is mostly link text. The link text is measured
    on the element's HTML (one string, no node per link)."""
    for el in root.query_selector_all("ul, ol, dl, table")[:]:
        if el.parent is None:
            continue
        links = _LINK_RE.findall(el.html)
        if len(links) < 3:
            continue
        n = _text_len(el)
        linked = sum(len(_TAG_RE.sub("", a).strip()) for a in links)
        if n and linked / n >= threshold:
            el.decompose()


_BLANKS = re.compile(r"\n{3,}")


def _isolate(root) -> None:
    """Leave ``root`` the only content of the document: every sibling of it and of its ancestors is removed
    (``extract_plain_text`` takes a whole tree)."""
    node = root
    while node is not None and node.tag not in ("html", "#document"):
        parent = node.parent
        if parent is None:
            break
        for sibling in parent.child_nodes[:]:
            if sibling is not node:
                sibling.decompose()
        node = parent


def _plain(tree) -> str:
    text = extract_plain_text(tree, preserve_formatting=True, main_content=False, list_bullets=False,
                              alt_texts=False, links=False, form_fields=False, noscript=False)
    return _BLANKS.sub("\n\n", text).strip()


def _title(tree: HTMLTree, root) -> str:
    title = (tree.title or "").strip()
    if not title and root is not None:
        h1 = root.query_selector("h1")
        title = _text_len(h1) and h1.text.strip() or ""
    return " ".join(title.split())


def extract_corpusmill(html: str, cfg: ExtractConfig) -> Extracted:
    tree = HTMLTree.parse(html)
    body = tree.body
    if body is None:
        return Extracted("", _title(tree, None), NO_MAIN_TEXT, "none", len(html))
    total = _text_len(body)
    if total == 0:
        return Extracted("", _title(tree, None), NO_MAIN_TEXT, "body", len(html))
    _prune(body, html, total, cfg)
    root, how = _choose_root(body, _text_len(body))
    _drop_link_dense(root, cfg.boilerplate_link_density)
    title = _title(tree, root)
    _isolate(root)
    text = _plain(tree)
    return Extracted(text, title, None, how, len(html))


def extract_resiliparse(html: str, cfg: ExtractConfig) -> Extracted:
    tree = HTMLTree.parse(html)
    skip = [s for s, keep in (("table", cfg.keep_tables), ("ul, ol, dl", cfg.keep_lists), ("pre", cfg.keep_code))
            if not keep]
    text = extract_plain_text(tree, preserve_formatting=True, main_content=True, list_bullets=False,
                              alt_texts=False, comments=False, skip_elements=skip or None)
    return Extracted(_BLANKS.sub("\n\n", text).strip(), _title(tree, None), None, "resiliparse", len(html))


def extract_trafilatura(html: str, cfg: ExtractConfig) -> Extracted:
    import trafilatura

    text = trafilatura.extract(html, include_tables=cfg.keep_tables, include_comments=False,
                               include_formatting=False, favor_precision=False, favor_recall=False) or ""
    if not cfg.keep_code or not cfg.keep_lists:  # trafilatura has no switch for these: its text keeps them
        pass
    meta = trafilatura.extract_metadata(html) if text else None
    title = (meta.title or "") if meta is not None else ""
    return Extracted(text.strip(), title, None, "trafilatura", len(html))


_EXTRACTORS = {"corpusmill": extract_corpusmill, "resiliparse": extract_resiliparse,
               "trafilatura": extract_trafilatura}


def extract(html: str, cfg: ExtractConfig | None = None) -> Extracted:
    """The main text of ``html`` (a decoded page: charset detection is the readers' work) by the configured
    extractor. Never raises on bad HTML: an empty page, a page without body or without text gives
    ``reason="no_main_text"``; one longer than ``max_html_chars`` ``html_too_large``; a text shorter than
    ``min_text_chars`` ``too_short_after_extraction``."""
    cfg = cfg or ExtractConfig()
    if not isinstance(html, str):
        return Extracted("", "", NOT_HTML, "none", 0)
    if len(html) > cfg.max_html_chars:
        return Extracted("", "", TOO_LARGE, "none", len(html))
    if not html.strip():
        return Extracted("", "", NO_MAIN_TEXT, "none", len(html))
    result = _EXTRACTORS[cfg.extractor](html, cfg)
    if result.reason is None:
        if not result.text:
            result.reason = NO_MAIN_TEXT
        elif len(" ".join(result.text.split())) < cfg.min_text_chars:
            result.reason = TOO_SHORT
    return result
