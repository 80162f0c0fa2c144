"""The pure core of the extract step: ``extract(html, cfg) -> Extracted``, the main text of an HTML page.

The corpusmill extractor works on Resiliparse's DOM (lexbor, C): every rule below is about the page's structure or
the vocabulary of boilerplate in general use on the web, never about one site:

1. The site's own mark first: a single ``<main>`` / ``role=main``, else a single ``<article>``, holding at least
   30% of the page's text becomes the root; everything else is dropped.
2. Prune (inside that root, else in the whole body): ``nav``, ``aside``, ``footer``, ``form``, ``dialog``,
   ``menu``; a ``header`` without the page's ``<h1>``; ARIA landmarks that are not content (navigation, banner,
   contentinfo, complementary, search, dialog); hidden elements; block elements whose class or id names
   boilerplate (menu, breadcrumb, cookie/consent, share/social, related, comments, sidebar/widget, footer,
   ad/sponsor, newsletter/subscribe, pagination: the vocabulary Readability and boilerplate studies list), read
   class word by class word. An element that holds half the page's text is never pruned, whatever its tag or name.
3. Without a marked root: the element that gathers the most paragraph text (Readability's scoring: each
   paragraph, list item, cell, code block or text-only ``<div>`` credits its parent fully and its grandparent
   half), widened over wrappers that add little and to its parent when same-tag siblings score too, and up a
   manual's nesting while it stands among siblings of its own tag and class.
4. Inside the root, drop link-dense lists and tables (three links or more, mostly link text: related links, tag
   clouds, pagers).
5. Text of the root by Resiliparse's ``extract_plain_text`` (block structure kept: paragraphs, headings, list
   items and table rows one a line, ``<pre>`` with its line breaks), scripts, styles, form fields, frames and
   images skipped there, in C.

The other two extractors (``resiliparse``, ``trafilatura``) are there to compare and as fallbacks of choice.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import repeat

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


# Tags whose content is never main text. The structural ones are removed from the tree (before the main content
# is chosen, so that a navigation block cannot be chosen; a form only when it does not hold most of the page's
# text: an ASP.NET page wraps everything in one <form>); the others are only skipped, in C, while the text is
# taken (``extract_plain_text``'s skip list: they never reach Python).
_NEVER = "nav, aside, footer, form, dialog, menu"
_SKIPPED = ["script", "style", "noscript", "template", "svg", "iframe", "object", "embed", "canvas", "button",
            "select", "textarea", "input", "img", "picture", "area"]  # img..area: alt texts are not the page's text
# ARIA roles of landmarks that are not content; hidden elements.
_ROLES = frozenset(("navigation", "banner", "contentinfo", "complementary", "search", "dialog", "alertdialog",
                    "menu", "menubar", "toolbar"))
_HIDDEN = "[hidden], [aria-hidden=true]:not(a)"
# Class/id tokens of boilerplate in general use (whole tokens, or token prefixes for the open families).
_BOILER_TOKENS = {
    "nav", "navbar", "navigation", "menu", "menubar", "breadcrumb", "breadcrumbs", "crumbs", "crumb", "cookie",
    "cookies", "consent", "gdpr", "share", "sharing", "shares", "social", "sns", "related", "recommended",
    "recommend", "comments", "comment", "disqus", "respond", "responses", "replies", "sidebar", "widget",
    "widgets", "footer", "colophon", "copyright", "banner", "advert", "advertisement", "ad", "ads", "adv",
    "sponsor", "sponsored", "promo", "newsletter", "subscribe", "subscription", "signup", "popup", "modal",
    "pagination", "pager", "masthead", "toolbar", "topbar", "skip", "login", "search", "tagcloud", "byline",
    "dateline", "rail", "outbrain", "taboola", "dfp", "yarpp", "trending", "popular", "discussion", "addthis",
    "sharethis", "toc", "tags", "trail", "follow", "mailing", "header",
}
# a header names the page's top bar, and an article's own head too: one holding the page's <h1> stays
_HEADER_TOKENS = frozenset(("header", "masthead"))
_BOILER_PREFIXES = ("comment", "share", "social", "sidebar", "cookie", "breadcrumb", "related", "advert",
                    "sponsor", "newsletter", "subscri", "promo", "popup", "pagination", "widget", "navbar",
                    "footer", "disqus", "recommend")
_BOILER_SUFFIXES = ("nav", "menu", "footer", "sidebar", "banner", "comments")
_TOKEN_SPLIT = re.compile(r"[\s_\-:.]+|(?<=[a-z])(?=[A-Z])")
# Names that mark content: an element so named is not pruned by the vocabulary.
_CONTENT_TOKENS = {"content", "article", "main", "post", "entry", "story", "body", "text", "markdown", "prose"}

_PARAGRAPHS = "p, pre, li, td, dd, blockquote"
# A <div> that holds text but no block element as a child is a paragraph too (Readability turns such divs into
# <p>): DocBook and publican manuals, many CMS and exported documents write every paragraph as <div class="para">.
# Not one inside a paragraph counted already.
_BLOCK_TAGS = ("p", "div", "section", "article", "ul", "ol", "dl", "table", "pre", "blockquote", "h1", "h2", "h3", "h4",
               "h5", "h6", "header", "figure", "form")
_BLOCK_CHILD = ", ".join(f"> {tag}" for tag in _BLOCK_TAGS)
# (children only: a descendant test walks every div's whole subtree, and DocBook nests divs deep)
_LEAF_DIVS = f"div:not(:has({_BLOCK_CHILD})):not(p div, pre div, li div, td div, dd div, blockquote div)"


def _boilerplate_token(value: str) -> str | None:
    """The boilerplate token (a part of the value, as written) of a class or id value, or None. Read word by
    word (class names are space-separated): a word with a boilerplate token is boilerplate whatever else it says
    (``post-navigation``, ``entry-footer``, ``sidebar-content``, ``main-nav``); a word without one whose last
    part names content (``post-content``, ``article-body``, ``content-main``) vetoes the element
    (``entry-content share-ready`` is content; ``post-meta sharedaddy`` is not)."""
    verdict = None
    for word in value.split():
        found = None
        head_is_content = False
        for t in _TOKEN_SPLIT.split(word):
            if not t:
                continue
            low = t.lower()
            head_is_content = low in _CONTENT_TOKENS
            if not head_is_content and (low in _BOILER_TOKENS or low.startswith(_BOILER_PREFIXES)
                                        or low.endswith(_BOILER_SUFFIXES)):
                found = found or t
        if found is None and head_is_content:
            return None
        verdict = verdict or found
    return verdict


def _text_len(node) -> int:
    return len(node.text) if node is not None else 0


# Resiliparse wraps every DOM node it hands to Python in a cached object (a few microseconds each), and iterating
# its node lists is quadratic: the code below takes node lists by slice (``[:]``) and touches as few nodes as it
# can. The class/id vocabulary is matched on the attribute values found in the HTML source (a regex over the
# string): the query asks only for the boilerplate tokens the page uses, and each element it returns is judged
# on its own value.
# class and id values, double-quoted, single-quoted or bare (a literal prefix each: the regex engine skips ahead),
# taken with their quotes (one string a match, no tuple of groups) and unquoted only when first seen
_ATTR_RES = (re.compile(r"""class=("[^"<>]*"|'[^'<>]*'|[^\s"'<>=`]+)"""),
             re.compile(r"""id=("[^"<>]*"|'[^'<>]*'|[^\s"'<>=`]+)"""))
_NAME_CACHE: dict[str, str | None] = {}
_QUOTED_NAME_CACHE: dict[str, str | None] = {}  # the same verdicts, keyed by the value as the source quotes it
# every string a boilerplate word can hold (a token, prefix or suffix): a value (lowercased) holding none has no
# boilerplate token, and most values hold none (an id such as "id-1.11.12.6.2"): one regex search settles them
_ANY_BOILER_RE = re.compile("|".join(map(re.escape, sorted(set(_BOILER_TOKENS) | set(_BOILER_PREFIXES)
                                                           | set(_BOILER_SUFFIXES), key=len, reverse=True))))
_SAFE_VALUE = re.compile(r'^[^\\"\n]*$')
# inline elements are never pruned by their name (``<span class="hljs-comment">`` inside code is code)
_INLINE = frozenset(("span", "code", "b", "i", "em", "strong", "sup", "sub", "var", "kbd", "samp", "tt", "small",
                     "mark", "abbr", "time", "wbr", "br", "img"))


_NEVER_TAGS = frozenset(t.strip() for t in _NEVER.split(","))
_PRUNED_TAGS = sorted(_NEVER_TAGS | {"header"})
_TAGS_RE = re.compile(r"<(" + "|".join(_PRUNED_TAGS) + r")\b")  # the tags a page holds (case as HTML5 writes)
# in the name selectors: the two inline tags that carry names most (``<span class="hljs-comment">``, the links of
# a menu), left in C; a short :not() list, as each name in it costs a match against every element
_NOT_INLINE = ":not(span, a)"
def _name_verdict(value: str) -> str | None:
    verdict = _NAME_CACHE.get(value, False)
    if verdict is False:
        verdict = _boilerplate_token(value) if _ANY_BOILER_RE.search(value.lower()) else None
        if len(_NAME_CACHE) < 100_000:
            _NAME_CACHE[value] = verdict
    return verdict


def _quoted_name_verdict(quoted: str) -> str | None:
    """``_name_verdict`` of a class or id value as ``_ATTR_RES`` takes it from the source (in its quotes)."""
    verdict = _QUOTED_NAME_CACHE.get(quoted, False)
    if verdict is False:
        verdict = _name_verdict(quoted[1:-1] if quoted[:1] in ("'", '"') else quoted)
        if len(_QUOTED_NAME_CACHE) < 100_000:
            _QUOTED_NAME_CACHE[quoted] = verdict
    return verdict


def _boilerplate_selector(html: str) -> str:
    """A CSS selector list that matches (at least) every element whose class or id names boilerplate: one
    substring selector per boilerplate token found in the HTML source's class and id values (few selectors, so
    one query stays cheap); ``_named_boilerplate`` then checks each match's own value."""
    parts = []
    for attr, pattern in zip(("class", "id"), _ATTR_RES):
        quoted_values = set(pattern.findall(html))
        # the verdicts known already looked up in C (a page's values are mostly known: the site's template)
        tokens = set(map(_QUOTED_NAME_CACHE.get, quoted_values, repeat(False)))
        if False in tokens:
            tokens = {_quoted_name_verdict(quoted) for quoted in quoted_values}
        tokens.discard(None)
        # "comment" matches what "comments" and "commentlist" would: one selector for them all (each selector
        # costs a match against every element)
        for token in sorted(tokens, key=lambda token: (len(token), token)):  # (the same selector every run)
            if _SAFE_VALUE.match(token) and not any(t in token for t in tokens if len(t) < len(token)):
                parts.append(f'[{attr}*="{token}"]')
    return f":is({', '.join(parts)}){_NOT_INLINE}" if parts else ""


def _named_token(el) -> str | None:
    """The boilerplate token of the element's class or id, or None."""
    for attr in ("class", "id"):
        value = el.getattr(attr)
        if value:
            token = _name_verdict(value)
            if token is not None:
                return token
    return None


def _prune(root, html: str, upper: bool, total: int, cfg: ExtractConfig) -> None:
    """Remove what is never main text (step 1), in one selector query. ``total``: the text length of the whole
    body; an element holding more than half of it is kept whatever its name or role (a site that names its
    wrapper "main-nav"), and inline elements are never pruned by name. ``upper``: the page writes its tags in
    capitals (HTML's names are case-insensitive)."""
    guard = max(total // 2, 1)
    # a selector costs its match against every element: ask only for what the source holds
    present = set(_TAGS_RE.findall(html))
    if upper:  # tags written in capitals (old HTML): ask for every tag of the list
        present = set(_PRUNED_TAGS)
    never = _NEVER_TAGS & present
    selectors = sorted(never) + (["header"] if "header" in present else [])
    if "role=" in html or upper:
        selectors.append("[role]")
    if "hidden" in html or upper:
        selectors.append(_HIDDEN)
    names = _boilerplate_selector(html)
    if names:
        selectors.append(names)
    if not selectors:
        return
    full = ", ".join(selectors)
    # the outermost matches only (what is inside a removed element goes with it, never handed to Python); inside
    # a match that stays (a header with the page's heading, role=main, a wrapper holding most of the text), every
    # match is looked at
    outermost = f":is({full}):not(:is({full}) *)"
    for el in root.query_selector_all(outermost)[:]:
        if not _remove_if_boilerplate(el, never, guard):
            for inner in el.query_selector_all(full)[:]:
                if inner.parent is not None:  # (None: inside one removed already)
                    _remove_if_boilerplate(inner, never, guard)


def _remove_if_boilerplate(el, never, guard: int) -> bool:
    """Decompose ``el`` when it is boilerplate by its tag, role, hidden state or name; whether it was."""
    tag = el.tag
    if tag in never:
        if tag != "form" or _text_len(el) < guard:  # (an ASP.NET page wraps all of itself in one <form>)
            el.decompose()
            return True
        return False
    if tag == "header":
        if el.query_selector("h1") is None:
            el.decompose()
            return True
        return False
    if tag in _INLINE:
        return False
    if el.getattr("role") in _ROLES or el.hasattr("hidden") or el.getattr("aria-hidden") == "true":
        boilerplate = True
    else:
        token = _named_token(el)
        boilerplate = token is not None and not (token.lower() in _HEADER_TOKENS and el.query_selector("h1"))
        if boilerplate and token.lower().startswith("sidebar") and _among_paragraphs(el):
            boilerplate = False
    if boilerplate and _text_len(el) < guard:
        el.decompose()
        return True
    return False


_BLOCK_TAG_SET = frozenset(_BLOCK_TAGS)
# a block element's start tag anywhere in an element's serialized HTML (lexbor writes tag names in lower case, and
# escapes "<" in text): none after the element's own, and no child of it is a block
_BLOCK_START_RE = re.compile(r"<(?:" + "|".join(_BLOCK_TAGS) + r")[\s/>]")


def _is_leaf_div(div) -> bool:
    """Whether no element child of ``div`` is a block (``_BLOCK_TAGS``: what ``div:not(:has(> p, > div, …))``
    says), without a selector query (each costs its parse and a walk of the subtree): a div without element
    children, or whose first child is a block, is settled by that child; else its HTML holding no block start tag
    past its own settles it; else its children are looked at one by one."""
    child = div.first_element_child
    if child is None:
        return True
    if child.tag in _BLOCK_TAG_SET:
        return False
    if _BLOCK_START_RE.search(div.html, 1) is None:
        return True
    while child is not None:
        if child.tag in _BLOCK_TAG_SET:
            return False
        child = child.next_element_sibling
    return True


def _among_paragraphs(el) -> bool:
    """Whether ``el`` stands among paragraphs of the text (its parent, or the list's parent when it sits in a list
    item, holds a paragraph of 80 characters or more: a ``<p>``, or a ``<div>`` without block children, as a
    child): a box named "sidebar" there is a note inside the text (DocBook's and AsciiDoc's sidebars, Sphinx's
    sidebar directive), where a page's side column stands beside other columns, blocks of blocks. The walk goes
    out from ``el``, its previous siblings first (a note follows the paragraph it comments), and stops at the
    first such paragraph: a selector query would walk the parent's whole subtree (a manual's section holds the
    rest of the page) and hand every paragraph to Python, each node handed over costing microseconds."""
    parent = el.parent
    if parent is None:
        return False
    if parent.tag in ("li", "dd") and parent.parent is not None:
        parent = parent.parent.parent or parent.parent
        return _holds_paragraph(parent.first_element_child, "next_element_sibling")
    return (_holds_paragraph(el.previous_element_sibling, "previous_element_sibling")
            or _holds_paragraph(el.next_element_sibling, "next_element_sibling"))


def _holds_paragraph(child, step: str) -> bool:
    """Whether ``child`` or a sibling of it in the direction ``step`` is a paragraph of 80 characters or more
    (a ``<p>``, or a ``<div>`` without block children)."""
    while child is not None:
        tag = child.tag
        if tag == "p":
            if _text_len(child) >= 80:
                return True
        elif tag == "div" and _text_len(child) >= 80 and _is_leaf_div(child):
            return True
        child = getattr(child, step)
    return False


def _semantic_root(body, html: str, upper: bool, total: int):
    """A single ``<main>`` / ``role=main``, else a single ``<article>``, holding at least 30% of the page's
    text: the site's own mark of its main content (step 2, first rule)."""
    found = []
    if upper or "<main" in html:
        found = body.get_elements_by_tag_name("main")[:]
    if upper or ("role=" in html and ("role=\"main" in html or "role=main" in html or "role='main" in html)):
        found = list({id(el): el for el in (*found, *body.get_elements_by_attr("role", "main")[:])}.values())
    if len(found) == 1 and _text_len(found[0]) >= 0.3 * total:
        return found[0], "main"
    if upper or "<article" in html:
        found = body.get_elements_by_tag_name("article")[:]
        if len(found) == 1 and _text_len(found[0]) >= 0.3 * total:
            return found[0], "article"
    return None, ""


_BLOCKISH = frozenset(("p", "div", "section", "article", "ul", "ol", "dl", "table", "pre", "blockquote", "h1", "h2",
                       "h3", "h4", "h5", "h6", "header", "figure"))


def _scored_root(body, total: int):
    """The element that gathers the most paragraph text (step 2, when the page marks no main content). Text-only
    divs count as paragraphs when the page's ``<p>`` elements hold under a quarter of its text (``total``): a page
    that writes its paragraphs in ``<p>`` is spared the costlier query."""
    own: dict = {}
    paragraphs = [(el, el.text) for el in body.query_selector_all(_PARAGRAPHS)[:]]
    if sum(len(text) for el, text in paragraphs if el.tag == "p") < total // 4:
        paragraphs += [(el, el.text) for el in body.query_selector_all(_LEAF_DIVS)[:]]
    for el, text in paragraphs:
        n = len(text)
        if n < 25:
            continue
        if el.tag in ("li", "td", "dd", "blockquote"):
            # a container of paragraphs is counted by them, not again as a whole (a comment's list item holds
            # its author, text and actions); an item that is a link is navigation (related links, menus)
            first = el.first_element_child
            if first is not None and (first.tag in _BLOCKISH or (first.tag == "a" and len(first.text) * 5 >= n * 4)):
                continue
        commas = text.count(",")
        if not text.isascii():  # (isascii reads a flag: the CJK commas need a scan each only in such a text)
            commas += text.count("，") + text.count("、")
        weight = n + 10 * commas
        parent = el.parent
        if parent is not None:
            own[parent] = own.get(parent, 0) + weight
    scores = dict(own)
    for parent, weight in own.items():  # the grandparent gets half, looked up once per parent
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
    own = _text_len(best) if parent is not None and parent.tag not in ("body", "html") else 0
    while parent is not None and parent.tag not in ("body", "html"):
        up = _text_len(parent)
        if up > own * 1.15 + 200:
            break
        best, parent, own = parent, parent.parent, up  # (the parent's text is the next step's own)
    # the text continues in siblings of the same kind (sections of a manual, posts of a thread): their parent
    parent = best.parent
    if parent is not None and parent.tag not in ("body", "html"):
        floor = 0.2 * scores.get(best, 0)
        tag = best.tag
        if any(score >= floor and node is not best and node.tag == tag and node.parent is parent
               for node, score in scores.items()):
            best = parent
    return _whole_document(best), f"scored:{best.tag}"


def _same_kind(a, b) -> bool:
    """Two parts of one document: the same tag and the same class (a generic wrapper without a class is no part),
    or both ``<section>`` / ``<article>``."""
    if a.tag != b.tag:
        return False
    cls = a.getattr("class")
    return bool(cls) and cls == b.getattr("class") or a.tag in ("section", "article")


def _whole_document(best):
    """Climb a manual's nesting (chapter > section > subsection, texinfo's, DocBook's, Sphinx's): while the
    element stands among siblings of its own kind (``_same_kind``) that hold text (200 characters or more), the
    document is their parent. A single-page manual is rooted in its top, not in the one subsection that gathers
    the most paragraphs."""
    while True:
        parent = best.parent
        if parent is None or parent.tag in ("body", "html"):
            return best
        if not any(sib is not best and _same_kind(best, sib) and _text_len(sib) >= 200
                   for sib in parent.children[:]):
            return best
        best = parent


_LINK_RE = re.compile(r"<a\b[^>]*>(.*?)</a>", re.S | re.I)
_TAG_RE = re.compile(r"<[^>]*>")


def _drop_link_dense(root, html: str, threshold: float) -> None:
    """Step 3: lists and tables of three links or more whose text is mostly link text. The link text is measured
    on the element's HTML (one string, no node per link)."""
    if "<a" not in html:
        return
    for el in root.query_selector_all("ul, ol, dl, table")[:]:
        # the link count first: asking for the parent hands a node to Python (None: inside one dropped already)
        if len(el.get_elements_by_tag_name("a")) < 3 or el.parent is None:
            continue
        links = _LINK_RE.findall(el.html)
        if len(links) < 3:
            continue
        n = _text_len(el)
        linked = sum(len(_TAG_RE.sub("", a).strip()) for a in links)
        if n and linked / n >= threshold:
            el.decompose()


_BLANKS = re.compile(r"\n{3,}")


def _isolate(body, root) -> None:
    """Leave ``root`` the only content of the document (``extract_plain_text`` takes a whole tree): one DOM call
    that makes it the body's only child, handing no other node to Python."""
    if root is not body:
        body.replace_children(root)


def _skipped(cfg: ExtractConfig) -> list[str]:
    """What the text never includes: ``_SKIPPED``, and tables, lists or code when the config leaves them out."""
    return _SKIPPED + [tag for tags, keep in ((("table",), cfg.keep_tables), (("ul", "ol", "dl"), cfg.keep_lists),
                                              (("pre",), cfg.keep_code)) if not keep for tag in tags]


def _plain(tree, skip: list[str]) -> str:
    # alt_texts stays on: with alt_texts=False, Resiliparse 2.0.0 drops everything inside a <figure> (mdBook's
    # code listings are figures: their code was lost); alt texts are short
    text = extract_plain_text(tree, preserve_formatting=True, main_content=False, list_bullets=False,
                              alt_texts=True, links=False, form_fields=False, noscript=False, skip_elements=skip)
    return (_BLANKS.sub("\n\n", text) if "\n\n\n" in text else text).strip()


def _title(tree: HTMLTree, root) -> str:
    title = (tree.title or "").strip()
    if not title and root is not None:
        h1 = root.query_selector("h1")
        title = _text_len(h1) and h1.text.strip() or ""
    return " ".join(title.split())


_UPPER_TAG_RE = re.compile(r"<[A-Z][A-Za-z]*[\s>]")


def _has_upper_tags(html: str) -> bool:
    """The page writes its tags in capitals (``<HTML>``, ``<P>``, ``<Main>``), judged on its first 4 kB (where
    its head is): then the lowercase shortcuts (which tags a page holds) do not hold."""
    return _UPPER_TAG_RE.search(html, 0, 4096) is not None


def extract_corpusmill(html: str, cfg: ExtractConfig) -> Extracted:
    tree = HTMLTree.parse(html)
    body = tree.body
    if body is None:
        return Extracted("", _title(tree, None), NO_MAIN_TEXT, "none", len(html))
    total = _text_len(body)
    if total == 0:
        return Extracted("", _title(tree, None), NO_MAIN_TEXT, "body", len(html))
    upper = _has_upper_tags(html)
    root, how = _semantic_root(body, html, upper, total)
    if root is not None:  # prune inside the site's own main element only: the rest goes first
        title = _title(tree, root)
        _isolate(body, root)
        _prune(root, html, upper, _text_len(root), cfg)
    else:
        _prune(body, html, upper, total, cfg)
        root, how = _scored_root(body, _text_len(body))
        title = _title(tree, root)
        _isolate(body, root)
    _drop_link_dense(root, html, cfg.boilerplate_link_density)
    text = _plain(tree, _skipped(cfg))
    return Extracted(text, title, None, how, len(html))


def extract_resiliparse(html: str, cfg: ExtractConfig) -> Extracted:
    tree = HTMLTree.parse(html)
    skip = [s for s, keep in (("table", cfg.keep_tables), ("ul, ol, dl", cfg.keep_lists), ("pre", cfg.keep_code))
            if not keep]
    text = extract_plain_text(tree, preserve_formatting=True, main_content=True, list_bullets=False,
                              comments=False, skip_elements=skip or None)
    return Extracted(_BLANKS.sub("\n\n", text).strip(), _title(tree, None), None, "resiliparse", len(html))


def extract_trafilatura(html: str, cfg: ExtractConfig) -> Extracted:
    import trafilatura

    text = trafilatura.extract(html, include_tables=cfg.keep_tables, include_comments=False,
                               include_formatting=False, favor_precision=False, favor_recall=False) or ""
    # keep_code/keep_lists false are refused with this extractor when the config is read (ExtractConfig)
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
    if not html or html.isspace():
        return Extracted("", "", NO_MAIN_TEXT, "none", len(html))
    result = _EXTRACTORS[cfg.extractor](html, cfg)
    if result.reason is None:
        if not result.text:
            result.reason = NO_MAIN_TEXT
        elif len(result.text) < cfg.min_text_chars * 2 and len(" ".join(result.text.split())) < cfg.min_text_chars:
            result.reason = TOO_SHORT
    return result
