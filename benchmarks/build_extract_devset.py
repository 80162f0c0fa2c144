"""Build the HTML main-text extraction development set: data/extract/dev.jsonl.gz (issue 45, item 5).

Two kinds of page, in English and Chinese:
  real       real documentation pages from the base image, whose main-content region the site marks itself:
             the Rust books (mdBook, ``<main>``), Debian's Node.js API docs (``#apicontent``) and the valgrind
             manual (DocBook: the body without its navigation tables). The truth is that region's text.
  templated  real texts (data/extract/README.md lists sources and licences) placed in web-like page templates
             written here: blog, news, docs, forum and shop layouts, each with realistic boilerplate before,
             after and inside the article (navigation, cookie banner, breadcrumbs, share bar, related links in
             the middle, ads, newsletter box, comments, sidebars, footer, scripts, styles). The truth is the
             text the builder put in the article: title, headings, paragraphs, list items, table cells and code,
             in order.

Each record: ``id, lang, kind, layout, source, licence, html, text``. Deterministic: one seed, sorted inputs.
The base image is read here, at build time only; tests and benchmarks read the built file.

    python benchmarks/build_extract_devset.py [--out data/extract/dev.jsonl.gz] [--seed 45]
"""
from __future__ import annotations

import argparse
import glob
import gzip
import html as htmlmod
import json
import os
import random
import re

import lxml.html

RUST_DOC = sorted(glob.glob("/root/.rustup/toolchains/stable-*/share/doc/rust/html"))
NODE_DOC = "/usr/share/doc/nodejs/api"
VALGRIND_DOC = "/usr/share/doc/valgrind/html"
# the shared corpus sample: next to the main checkout (../shared) or to a worktree's parent (../../shared)
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = next((p for p in (os.path.join(_ROOT, "..", "shared", "corpora", "real_text_sample.jsonl.gz"),
                           os.path.join(_ROOT, "..", "..", "shared", "corpora", "real_text_sample.jsonl.gz"))
               if os.path.exists(p)), "../shared/corpora/real_text_sample.jsonl.gz")

MAX_PAGE_BYTES = 120_000
BLOCK_TAGS = {"p", "div", "section", "article", "main", "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "li", "dl",
              "dt", "dd", "table", "tr", "td", "th", "thead", "tbody", "pre", "blockquote", "br", "hr", "header",
              "footer", "nav", "aside", "figure", "figcaption", "details", "summary", "form", "caption"}
DROP_TAGS = {"script", "style", "noscript", "template", "svg", "button"}


# ---------------------------------------------------------------------------------------------------------------
# Truth of a real page: the text of its marked region, block by block.

def region_text(el) -> str:
    """The text of an lxml element as blocks: one line per block element, inline text joined as written;
    scripts, styles and buttons left out."""
    out: list[str] = []

    def walk(node):
        tag = node.tag if isinstance(node.tag, str) else ""
        if tag in DROP_TAGS:
            if node.tail:
                out.append(node.tail)
            return
        block = tag in BLOCK_TAGS
        if block:
            out.append("\n")
        if node.text and tag:
            out.append(node.text)
        for child in node:
            walk(child)
        if block:
            out.append("\n")
        elif tag in ("td", "th"):
            out.append(" ")
        if node.tail:
            out.append(node.tail)

    tail, el.tail = el.tail, None
    walk(el)
    el.tail = tail
    lines = [re.sub(r"\s+", " ", line).strip() for line in "".join(out).split("\n")]
    return "\n".join(line for line in lines if line)


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def real_pages(rng: random.Random) -> list[dict]:
    pages = []
    # mdBook books: main text in <main>
    books = ["book", "cargo", "edition-guide", "embedded-book", "rustc", "reference", "rust-by-example", "nomicon",
             "rustdoc", "style-guide"]
    per_book = {"book": 8, "reference": 5, "rust-by-example": 5, "nomicon": 4}
    for book in books:
        files = sorted(f for f in glob.glob(os.path.join(RUST_DOC[0], book, "**", "*.html"), recursive=True)
                       if os.path.getsize(f) < MAX_PAGE_BYTES and "print.html" not in f and "404" not in f
                       and "toc.html" not in f)
        for path in rng.sample(files, min(per_book.get(book, 2), len(files))):
            html = _read(path)
            main = lxml.html.fromstring(html).find(".//main")
            truth = region_text(main) if main is not None else ""
            if len(truth) < 200:
                continue
            rel = os.path.relpath(path, RUST_DOC[0])
            pages.append(dict(id=f"rust/{rel}", lang="en", kind="real", layout="mdbook", source=f"rust-doc/{rel}",
                              licence="MIT OR Apache-2.0 (The Rust Project Developers)", html=html, text=truth))
    # Node.js API docs: main text in #apicontent
    files = sorted(f for f in glob.glob(os.path.join(NODE_DOC, "*.html"))
                   if os.path.getsize(f) < MAX_PAGE_BYTES and not f.endswith(("all.html", "index.html")))
    for path in rng.sample(files, 16):
        html = _read(path)
        region = lxml.html.fromstring(html).get_element_by_id("apicontent", None)
        truth = region_text(region) if region is not None else ""
        if len(truth) < 200:
            continue
        name = os.path.basename(path)
        pages.append(dict(id=f"nodejs/{name}", lang="en", kind="real", layout="nodejs-api",
                          source=f"nodejs-doc/api/{name}", licence="MIT (Node.js contributors; Debian pkg nodejs-doc)",
                          html=html, text=truth))
    # valgrind manual (DocBook): the body without its navigation header/footer tables
    files = sorted(f for f in glob.glob(os.path.join(VALGRIND_DOC, "*.html")) if os.path.getsize(f) < MAX_PAGE_BYTES)
    for path in rng.sample(files, 8):
        html = _read(path)
        body = lxml.html.fromstring(html).find(".//body")
        if body is None:
            continue
        for toc in body.xpath(".//div[@class='toc']"):  # the in-page table of contents: navigation
            toc.getparent().remove(toc)
        for nav in body.xpath(".//table[@class='nav']"):
            parent = nav.getparent()
            parent.getparent().remove(parent) if parent is not body and len(parent) == 1 + len(parent.xpath("br")) \
                else parent.remove(nav)
        truth = region_text(body)
        if len(truth) < 200:
            continue
        name = os.path.basename(path)
        pages.append(dict(id=f"valgrind/{name}", lang="en", kind="real", layout="docbook",
                          source=f"valgrind-doc/html/{name}",
                          licence="GPL-2.0+ (Valgrind Developers; Debian pkg valgrind copyright)", html=html,
                          text=truth))
    return pages


# ---------------------------------------------------------------------------------------------------------------
# Real texts for the templated pages.

# Sources with a licence that allows shipping them (public domain, permissive, copyleft with attribution); the
# news samples of the shared corpus (research use only, or no licence stated) are left out.
EN_ARTICLE_SOURCES = ("austen", "enwiki_gensim", "kjv_bible", "jargon", "devil")
ZH_ARTICLE_SOURCES = ("debian_faq_zh", "debian_handbook_zh", "debian_reference_zh", "linux_doc_zh")
EN_COMMENT_SOURCES = ("fortunes_en",)
ZH_COMMENT_SOURCES = ("reviews_zh",)
EN_DOCS_SOURCES = ("linux_doc",)


def load_texts() -> dict[str, list[dict]]:
    wanted = set(EN_ARTICLE_SOURCES + ZH_ARTICLE_SOURCES + EN_COMMENT_SOURCES + ZH_COMMENT_SOURCES + EN_DOCS_SOURCES)
    by_source: dict[str, list[dict]] = {}
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            if rec["source"] in wanted:
                by_source.setdefault(rec["source"], []).append(rec)
    return by_source


def paragraphs(text: str, zh: bool) -> list[str]:
    """The text's paragraphs (blank-line separated; a wrapped line joined), cleaned of wiki and jargon markup."""
    text = re.sub(r"'{2,}", "", text)
    text = re.sub(r"[{}]", "", text)
    paras = []
    for block in re.split(r"\n\s*\n", text):
        lines = [ln.strip() for ln in block.strip().split("\n") if ln.strip()]
        if not lines:
            continue
        if zh and all(len(ln) > 30 for ln in lines):  # People's Daily: one paragraph per line
            paras.extend(lines)
        else:
            paras.append(("" if zh else " ").join(lines))
    return [p for p in paras if len(p) >= (8 if zh else 20)]


def sentences(p: str, zh: bool) -> list[str]:
    parts = re.split(r"(?<=[。！？])" if zh else r"(?<=[.!?])\s+", p)
    return [s.strip() for s in parts if s.strip()]


# ---------------------------------------------------------------------------------------------------------------
# Boilerplate vocabulary (generic web furniture, in each language).

BP = {
    "en": {
        "nav": ["Home", "News", "World", "Business", "Technology", "Science", "Culture", "Opinion", "Sport", "Video",
                "About us", "Contact", "Subscribe", "Log in", "Sign up", "Blog", "Archive", "Events", "Shop", "Help"],
        "cookie": ["We use cookies to improve your experience on our site, to personalise content and ads and to "
                   "analyse our traffic. By continuing to browse you agree to our use of cookies.",
                   "This website stores cookies on your computer. These cookies are used to collect information "
                   "about how you interact with our website and allow us to remember you."],
        "cookie_btn": ["Accept all", "Reject", "Manage preferences", "Cookie settings"],
        "share": ["Share on Facebook", "Tweet", "Share on LinkedIn", "Email this article", "Copy link", "Print"],
        "related_h": ["Related articles", "You may also like", "Read more", "More from this section",
                      "Recommended for you", "Popular now"],
        "comments_h": ["Comments", "Join the discussion", "Leave a reply", "Responses"],
        "comment_meta": ["Reply", "Report", "Like", "Quote", "permalink"],
        "footer": ["Privacy policy", "Terms of use", "Accessibility", "Careers", "Advertise with us", "Sitemap",
                   "RSS feeds", "Contact the newsroom", "Manage cookies"],
        "copyright": "© {year} {site}. All rights reserved.",
        "newsletter": ["Get our weekly newsletter with the best stories delivered to your inbox.",
                       "Sign up for updates. No spam, unsubscribe at any time."],
        "ad": ["Advertisement", "Sponsored content", "Ad"],
        "byline": "By {author} | {date}",
        "crumb_home": "Home",
        "sidebar_h": ["Popular posts", "Tags", "Archives", "Categories", "Most read"],
        "tags": ["history", "science", "culture", "books", "travel", "politics", "economy", "health", "opinion"],
        "authors": ["Alice Martin", "John Carter", "Maria Lopez", "Sam Patel", "Emma Wilson", "David Chen"],
        "sites": ["The Daily Ledger", "Northwind Journal", "Open Notes", "Harbor Times", "Quill & Ink"],
        "forum_meta": ["Posts: {n}", "Joined: {date}", "Member", "Senior member", "Moderator"],
        "shop": ["Add to cart", "Buy now", "In stock", "Free shipping on orders over $50", "Customer reviews",
                 "Write a review", "Compare", "Add to wishlist", "Questions & answers"],
        "spec_h": "Specifications",
        "spec": [("Weight", "{n} g"), ("Pages", "{n}"), ("Dimensions", "{a} x {b} cm"), ("Format", "Hardcover"),
                 ("Language", "English"), ("Publisher", "Harbor Press")],
        "search": "Search",
        "pager": ["Previous", "Next", "Page 1 of {n}"],
    },
    "zh": {
        "nav": ["首页", "新闻", "国际", "财经", "科技", "体育", "娱乐", "文化", "评论", "视频", "关于我们", "联系我们",
                "登录", "注册", "博客", "专题", "下载", "帮助中心", "商城", "社区"],
        "cookie": ["我们使用 Cookie 来改善您的浏览体验、个性化内容和广告并分析网站流量。继续浏览即表示您同意我们使用 Cookie。",
                   "本网站使用 Cookie 以确保您获得最佳体验。了解更多请查看我们的隐私政策。"],
        "cookie_btn": ["全部接受", "拒绝", "管理偏好", "Cookie 设置"],
        "share": ["分享到微信", "分享到微博", "分享到QQ空间", "复制链接", "打印", "收藏"],
        "related_h": ["相关文章", "猜你喜欢", "延伸阅读", "热门推荐", "更多报道", "相关阅读"],
        "comments_h": ["网友评论", "发表评论", "评论区", "全部评论"],
        "comment_meta": ["回复", "举报", "点赞", "引用"],
        "footer": ["隐私政策", "用户协议", "网站地图", "广告服务", "联系我们", "招聘信息", "意见反馈", "违法和不良信息举报"],
        "copyright": "版权所有 © {year} {site} 保留所有权利",
        "newsletter": ["订阅我们的每周精选，最新文章直达您的邮箱。", "关注我们的公众号，获取更多精彩内容。"],
        "ad": ["广告", "推广", "赞助内容"],
        "byline": "作者：{author}  发布时间：{date}",
        "crumb_home": "首页",
        "sidebar_h": ["热门文章", "标签", "文章归档", "分类目录", "排行榜"],
        "tags": ["历史", "科技", "文化", "读书", "旅游", "经济", "健康", "教育", "社会"],
        "authors": ["张伟", "李娜", "王芳", "刘洋", "陈静", "杨帆"],
        "sites": ["新华日报网", "晨光资讯", "开源笔记", "海港时报", "墨香书屋"],
        "forum_meta": ["帖子：{n}", "注册时间：{date}", "会员", "高级会员", "版主"],
        "shop": ["加入购物车", "立即购买", "现货", "满99元包邮", "商品评价", "写评价", "对比", "收藏商品", "问答"],
        "spec_h": "规格参数",
        "spec": [("重量", "{n} 克"), ("页数", "{n}"), ("尺寸", "{a} x {b} 厘米"), ("装帧", "精装"), ("语言", "中文"),
                 ("出版社", "海港出版社")],
        "search": "搜索",
        "pager": ["上一页", "下一页", "共 {n} 页"],
    },
}

# Class and id names of boilerplate as sites name it, varied per page (a general vocabulary, several spellings).
NAMES = {
    "nav": ["site-nav", "navbar", "main-menu", "topnav", "menu-primary", "global-header", "masthead", "header-links"],
    "cookie": ["cookie-banner", "consent-popup", "gdpr-notice", "cookie-notice", "cc-window", "privacy-bar"],
    "crumbs": ["breadcrumb", "breadcrumbs", "crumbs", "trail", "location-path"],
    "share": ["share-bar", "social-share", "sharing", "share-buttons", "social-links", "sns-share"],
    "related": ["related-posts", "related", "more-stories", "recommended", "read-more", "yarpp-related"],
    "comments": ["comments", "comment-section", "disqus_thread", "responses", "commentlist", "discussion"],
    "sidebar": ["sidebar", "side-column", "widget-area", "secondary", "rail", "aside-right"],
    "footer": ["site-footer", "footer", "page-footer", "colophon", "bottom-bar", "foot"],
    "ad": ["ad-slot", "advert", "sponsored", "ad-container", "dfp-ad", "promo"],
    "newsletter": ["newsletter", "subscribe-box", "signup-form", "mailing-list", "follow-us"],
    "article": ["post-content", "entry-content", "article-body", "story-body", "content-main", "text", "body-copy",
                "rich-text", "detail", "post"],
    "wrapper": ["container", "wrapper", "page", "layout", "site", "main-wrap", "grid"],
}


class Page:
    def __init__(self, rng: random.Random, lang: str, site: str):
        self.rng, self.lang, self.bp, self.site = rng, lang, BP[lang], site
        self.parts: list[str] = []
        self.truth: list[str] = []

    def name(self, kind: str) -> str:
        return self.rng.choice(NAMES[kind])

    def pick(self, key: str, k: int | None = None):
        items = self.bp[key]
        return self.rng.choice(items) if k is None else self.rng.sample(items, min(k, len(items)))

    # --- boilerplate blocks ------------------------------------------------------------------------------------
    def nav(self) -> str:
        links = "".join(f'<li><a href="/{i}">{esc(t)}</a></li>' for i, t in enumerate(self.pick("nav", 9)))
        form = f'<form action="/search"><input name="q" placeholder="{self.bp["search"]}"><button>{self.bp["search"]}' \
               f'</button></form>'
        if self.rng.random() < 0.5:
            return f'<header class="{self.name("nav")}"><div class="logo"><a href="/">{esc(self.site)}</a></div>' \
                   f'<nav><ul>{links}</ul></nav>{form}</header>'
        return f'<div id="{self.name("nav")}"><a class="brand" href="/">{esc(self.site)}</a><ul class="menu">{links}' \
               f'</ul>{form}</div>'

    def cookie(self) -> str:
        btns = "".join(f"<button>{esc(b)}</button>" for b in self.pick("cookie_btn", 3))
        role = ' role="dialog" aria-label="cookie consent"' if self.rng.random() < 0.5 else ""
        return f'<div class="{self.name("cookie")}"{role}><p>{esc(self.pick("cookie"))}</p>{btns}</div>'

    def crumbs(self, title: str) -> str:
        section = self.pick("nav")
        items = [f'<a href="/">{self.bp["crumb_home"]}</a>', f'<a href="/s">{esc(section)}</a>', esc(title[:40])]
        if self.rng.random() < 0.5:
            return f'<nav aria-label="breadcrumb"><ol class="{self.name("crumbs")}">' + \
                "".join(f"<li>{i}</li>" for i in items) + "</ol></nav>"
        return f'<div class="{self.name("crumbs")}">' + " &gt; ".join(items) + "</div>"

    def share(self) -> str:
        links = "".join(f'<a href="#" class="s{i}">{esc(t)}</a> ' for i, t in enumerate(self.pick("share", 4)))
        return f'<div class="{self.name("share")}">{links}</div>'

    def related(self, titles: list[str]) -> str:
        lis = "".join(f'<li><a href="/a/{i}">{esc(t)}</a></li>' for i, t in enumerate(titles))
        tag = self.rng.choice(["aside", "div", "section"])
        return f'<{tag} class="{self.name("related")}"><h3>{esc(self.pick("related_h"))}</h3><ul>{lis}</ul></{tag}>'

    def ad(self) -> str:
        return f'<div class="{self.name("ad")}"><span>{esc(self.pick("ad"))}</span><a href="/ad"><img src="/ad.png" ' \
               f'alt=""></a></div>'

    def newsletter(self) -> str:
        return f'<div class="{self.name("newsletter")}"><p>{esc(self.pick("newsletter"))}</p><form><input ' \
               f'type="email"><button>OK</button></form></div>'

    def comments(self, texts: list[str]) -> str:
        items = []
        for t in texts:
            who = esc(self.rng.choice(self.bp["authors"]))
            meta = " · ".join(esc(m) for m in self.pick("comment_meta", 2))
            items.append(f'<li class="comment"><div class="comment-author">{who}</div><div class="comment-body"><p>'
                         f'{esc(t)}</p></div><div class="comment-meta">{meta}</div></li>')
        head = f'<h3>{esc(self.pick("comments_h"))} ({len(texts)})</h3>'
        if self.rng.random() < 0.5:
            return f'<section id="{self.name("comments")}">{head}<ol>{"".join(items)}</ol></section>'
        return f'<div class="{self.name("comments")}">{head}<ul>{"".join(items)}</ul></div>'

    def sidebar(self, titles: list[str]) -> str:
        lis = "".join(f'<li><a href="/p/{i}">{esc(t)}</a></li>' for i, t in enumerate(titles))
        tags = " ".join(f'<a href="/tag/{i}">{esc(t)}</a>' for i, t in enumerate(self.pick("tags", 6)))
        tag = "aside" if self.rng.random() < 0.5 else "div"
        return f'<{tag} class="{self.name("sidebar")}"><div class="widget"><h4>{esc(self.pick("sidebar_h"))}</h4>' \
               f'<ul>{lis}</ul></div><div class="widget"><h4>{esc(self.pick("sidebar_h"))}</h4>{tags}</div>' \
               f'{self.newsletter()}</{tag}>'

    def footer(self) -> str:
        links = " | ".join(f'<a href="/f{i}">{esc(t)}</a>' for i, t in enumerate(self.pick("footer", 6)))
        copy = self.bp["copyright"].format(year=self.rng.randint(2015, 2025), site=self.site)
        if self.rng.random() < 0.5:
            return f'<footer><div class="links">{links}</div><p>{esc(copy)}</p></footer>'
        return f'<div id="{self.name("footer")}"><div class="links">{links}</div><p>{esc(copy)}</p></div>'

    def scripts(self) -> str:
        return ('<script>window.dataLayer=window.dataLayer||[];function gtag(){dataLayer.push(arguments);}'
                'gtag("js",new Date());var articleText="tracking pixel loaded";</script>'
                '<script src="/static/app.js" async></script>')

    def style(self) -> str:
        return ("<style>body{font-family:Georgia,serif;margin:0}.menu li{display:inline}"
                ".hidden{display:none}</style>")

    # --- content blocks (the truth) -----------------------------------------------------------------------------
    def h(self, level: int, text: str) -> str:
        self.truth.append(text)
        return f"<h{level}>{esc(text)}</h{level}>"

    def p(self, text: str) -> str:
        self.truth.append(text)
        return f"<p>{esc(text)}</p>"

    def ul(self, items: list[str]) -> str:
        self.truth.extend(items)
        tag = self.rng.choice(["ul", "ol"])
        return f"<{tag}>" + "".join(f"<li>{esc(i)}</li>" for i in items) + f"</{tag}>"

    def pre(self, code: str) -> str:
        self.truth.append(code)
        return f"<pre><code>{esc(code)}</code></pre>"

    def table(self, rows: list[tuple[str, str]]) -> str:
        for a, b in rows:
            self.truth.append(f"{a} {b}")
        return "<table><tbody>" + "".join(f"<tr><th>{esc(a)}</th><td>{esc(b)}</td></tr>" for a, b in rows) + \
            "</tbody></table>"


def esc(text: str) -> str:
    return htmlmod.escape(text, quote=False)


def body_blocks(page: Page, paras: list[str], zh: bool, code: list[str] | None = None) -> list[str]:
    """Paragraphs as HTML blocks: some become sub-headings (a short sentence), some lists (their sentences)."""
    blocks = []
    for i, para in enumerate(paras):
        r = page.rng.random()
        sents = sentences(para, zh)
        if i > 0 and r < 0.12 and len(sents) >= 2:
            blocks.append(page.h(2, sents[0][:80].rstrip("。.")))
            rest = " ".join(sents[1:]) if not zh else "".join(sents[1:])
            blocks.append(page.p(rest))
        elif r < 0.22 and 3 <= len(sents) <= 8:
            blocks.append(page.ul(sents))
        else:
            blocks.append(page.p(para))
        if code and page.rng.random() < 0.3:
            blocks.append(page.pre(code.pop(0)))
    return blocks


def html_doc(page: Page, title: str, body: str) -> str:
    lang = "zh-CN" if page.lang == "zh" else "en"
    head = f'<head><meta charset="utf-8"><title>{esc(title)} - {esc(page.site)}</title>' \
           f'<meta name="viewport" content="width=device-width">{page.style()}' \
           f'<link rel="stylesheet" href="/static/site.css"></head>'
    return f'<!DOCTYPE html>\n<html lang="{lang}">{head}<body>{body}{page.scripts()}</body></html>'


def article_wrap(page: Page, inner: str) -> str:
    """The main-content container: <article>, <main>, a div with a content class, or bare."""
    r = page.rng.random()
    if r < 0.3:
        return f"<article>{inner}</article>"
    if r < 0.5:
        return f'<main><div class="{page.name("article")}">{inner}</div></main>'
    if r < 0.85:
        return f'<div class="{page.name("article")}">{inner}</div>'
    return f"<div>{inner}</div>"


def layout_blog(page, title, paras, zh, extras):
    byline = page.bp["byline"].format(author=page.rng.choice(page.bp["authors"]), date="2023-05-14")
    content = [page.h(1, title), f'<div class="meta">{esc(byline)}</div>', page.share()]
    blocks = body_blocks(page, paras, zh)
    mid = len(blocks) // 2
    content += blocks[:mid] + [page.related(extras["titles"][:3])] + blocks[mid:]
    content += [page.share(), f'<div class="tags">{" ".join(esc(t) for t in page.pick("tags", 4))}</div>']
    main = article_wrap(page, "".join(content))
    body = page.nav() + page.crumbs(title) + f'<div class="{page.name("wrapper")}">' + main + \
        page.comments(extras["comments"]) + page.sidebar(extras["titles"][3:8]) + "</div>" + page.footer() + \
        page.cookie()
    return body


def layout_news(page, title, paras, zh, extras):
    byline = page.bp["byline"].format(author=page.rng.choice(page.bp["authors"]), date="2022-11-02 08:30")
    header = f'<header>{page.h(1, title)}<p class="byline">{esc(byline)}</p></header>'
    blocks = body_blocks(page, paras, zh)
    third = max(1, len(blocks) // 3)
    content = [header, page.share()] + blocks[:third] + [page.ad()] + blocks[third:2 * third] + \
        [page.newsletter()] + blocks[2 * third:] + [page.related(extras["titles"][:4])]
    main = article_wrap(page, "".join(content))
    trending = page.related(extras["titles"][4:9])
    body = page.cookie() + page.nav() + page.crumbs(title) + page.ad() + main + trending + \
        page.comments(extras["comments"]) + page.footer()
    return body


def layout_docs(page, title, paras, zh, extras):
    toc = "".join(f'<li><a href="#s{i}">{esc(t)}</a></li>' for i, t in enumerate(extras["titles"][:8]))
    side = f'<nav class="toc" role="navigation"><h4>Contents</h4><ul>{toc}</ul></nav>' if page.rng.random() < 0.5 \
        else f'<div class="{page.name("sidebar")}"><ul class="toc">{toc}</ul></div>'
    code = list(extras["code"])
    blocks = [page.h(1, title)] + body_blocks(page, paras, zh, code)
    pager = " ".join(f'<a href="#">{esc(t.format(n=7))}</a>' for t in page.bp["pager"])
    main = article_wrap(page, "".join(blocks) + f'<div class="pager">{pager}</div>')
    body = page.nav() + f'<div class="{page.name("wrapper")}">' + side + page.crumbs(title) + main + "</div>" + \
        page.footer()
    return body


def layout_forum(page, title, paras, zh, extras):
    posts = []
    chunks = [paras[i:i + 2] for i in range(0, len(paras), 2)][:6]
    for n, chunk in enumerate(chunks):
        who = esc(page.rng.choice(page.bp["authors"]))
        meta = " ".join(esc(m.format(n=page.rng.randint(3, 900), date="2019-03")) for m in page.pick("forum_meta", 2))
        text = "".join(page.p(p) for p in chunk)
        actions = " ".join(f'<a href="#">{esc(m)}</a>' for m in page.pick("comment_meta", 3))
        posts.append(f'<div class="postrow"><div class="userinfo"><b>{who}</b><br>{meta}</div>'
                     f'<div class="postbody">{text}</div><div class="postfoot">{actions}</div></div>')
    head = page.h(1, title)
    thread = f'<div class="thread">{head}{"".join(posts)}</div>'
    similar = page.related(extras["titles"][:5])
    body = page.nav() + page.crumbs(title) + thread + similar + page.sidebar(extras["titles"][5:9]) + page.footer()
    return body


def layout_shop(page, title, paras, zh, extras):
    price = f'<div class="price">¥{page.rng.randint(20, 200)}.00</div>' if zh else \
        f'<div class="price">${page.rng.randint(9, 90)}.99</div>'
    buy = "".join(f"<button>{esc(b)}</button>" for b in page.pick("shop", 3))
    rows = [(k, v.format(n=page.rng.randint(100, 900), a=page.rng.randint(10, 30), b=page.rng.randint(10, 30)))
            for k, v in page.rng.sample(page.bp["spec"], 4)]
    desc = [page.h(1, title)] + [price, buy] + body_blocks(page, paras, zh) + [page.h(2, page.bp["spec_h"]),
                                                                             page.table(rows)]
    main = article_wrap(page, "".join(desc))
    reviews = page.comments(extras["comments"])
    also = page.related(extras["titles"][:6])
    body = page.nav() + page.crumbs(title) + main + also + reviews + page.footer() + page.cookie()
    return body


LAYOUTS = {"blog": layout_blog, "news": layout_news, "docs": layout_docs, "forum": layout_forum, "shop": layout_shop}


def title_of(rec: dict, paras: list[str], zh: bool) -> str:
    t = (rec.get("title") or "").strip()
    if len(t) < 4 or t.endswith(".html") or t.endswith(".cor") or t in ("pos", "neg") or re.search(r"part \d+", t):
        first = sentences(paras[0], zh)[0] if paras else t
        t = first[:60]
    return t


def templated_pages(rng: random.Random, texts: dict[str, list[dict]], per_layout: int) -> list[dict]:
    pages = []
    for lang in ("en", "zh"):
        zh = lang == "zh"
        art_sources = ZH_ARTICLE_SOURCES if zh else EN_ARTICLE_SOURCES
        pool = [r for s in art_sources for r in texts[s] if len(r["text"]) >= (600 if zh else 1500)]
        pool.sort(key=lambda r: r["id"])
        comment_pool = sorted((r for s in (ZH_COMMENT_SOURCES if zh else EN_COMMENT_SOURCES) for r in texts[s]
                               if 20 <= len(r["text"]) <= 400), key=lambda r: r["id"])
        title_pool = sorted({title_of(r, paragraphs(r["text"][:400], zh) or [r["text"][:60]], zh) for r in pool})
        code_pool = []
        for r in sorted(texts["linux_doc"], key=lambda r: r["id"]):  # literal blocks of the kernel docs
            for m in re.finditer(r"::\n\n(.+?)\n\n", r["text"], re.S):  # the literal block after "::"
                block = m.group(1)
                if 40 <= len(block) <= 600 and re.search(r"[;(){}=]", block):
                    code_pool.append((r, block))
        used = set()
        for layout in LAYOUTS:
            for n in range(per_layout):
                rec = rng.choice(pool)
                while rec["id"] in used:
                    rec = rng.choice(pool)
                used.add(rec["id"])
                paras = paragraphs(rec["text"], zh)
                # a page-sized excerpt: a run of paragraphs starting at a random place
                limit = rng.randint(1200, 3500) if zh else rng.randint(2500, 7000)
                start = rng.randrange(max(1, len(paras) - 3))
                chosen, size = [], 0
                for para in paras[start:]:
                    if size >= limit:
                        break
                    chosen.append(para)
                    size += len(para)
                title = title_of(rec, paras, zh)
                comments = [c["text"].strip().replace("\n", " ") for c in rng.sample(comment_pool,
                                                                                      rng.randint(3, 7))]
                code_recs = rng.sample(code_pool, 3) if layout == "docs" and not zh else []
                extras = {"titles": rng.sample([t for t in title_pool if t != title], 10), "comments": comments,
                          "code": [c[1] for c in code_recs]}
                page = Page(rng, lang, rng.choice(BP[lang]["sites"]))
                body = LAYOUTS[layout](page, title, chosen, zh, extras)
                licences = sorted({rec["licence"]} | {c[0]["licence"] for c in code_recs})
                pages.append(dict(id=f"templated/{lang}/{layout}/{n}", lang=lang, kind="templated", layout=layout,
                                  source=rec["id"] + "".join(f" + code from {c[0]['id']}" for c in code_recs),
                                  licence="; ".join(licences), html=html_doc(page, title, body),
                                  text="\n".join(page.truth)))
    return pages


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="data/extract/dev.jsonl.gz")
    ap.add_argument("--seed", type=int, default=45)
    ap.add_argument("--per-layout", type=int, default=8, help="templated pages per layout and language")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    pages = real_pages(rng) + templated_pages(rng, load_texts(), args.per_layout)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        for page in pages:
            gz.write((json.dumps(page, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8"))
    by = {}
    for p in pages:
        by[(p["lang"], p["kind"])] = by.get((p["lang"], p["kind"]), 0) + 1
    mb = sum(len(p["html"].encode()) for p in pages) / 1e6
    print(f"wrote {args.out}: {len(pages)} pages ({mb:.1f} MB of HTML): " +
          ", ".join(f"{k[0]}/{k[1]} {v}" for k, v in sorted(by.items())))


if __name__ == "__main__":
    main()
