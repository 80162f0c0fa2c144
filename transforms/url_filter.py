"""URL-level filters: a block list and an optional allow list of domains, URL prefixes and regexes, applied to
``meta["url"]`` before any text work (FineWeb's URL filter is the pattern: what a crawl should never have
fetched is dropped before it costs an extraction).

List file format (block and allow lists alike), one entry per line, UTF-8:

    # a comment: a line whose first non-blank character is '#'; blank lines are ignored
    example.com                      a domain: the host example.com and every subdomain (ads.example.com)
    https://example.com/ads/         a URL prefix: every URL that starts with it (scheme and host compared
                                     without case, the rest as written)
    re:^https?://[^/]+/wp-login      a regex (Python ``re``), searched anywhere in the URL

A domain is letters, digits, '-' and '.', optionally written with a leading '*.' or '.' (same meaning); a
non-ASCII domain is compared in its IDNA (punycode) form. Anything else (a host with a path but no scheme, a
space inside an entry, a regex that does not compile) is refused when the graph is built with a one-line error
naming the file and the line.

Decisions, in this order: a URL whose host is a blocked domain is removed with ``blocked_domain``; one that
matches a blocked prefix or regex with ``blocked_url``; when an allow list is given, a URL that matches none of
its entries is removed with ``not_allowed``. Documents without a URL (no ``meta[url_field]``, or an empty one)
pass untouched. Every document with a URL is annotated with its registered domain
(``annotations["url_filter"]["domain"]``: ``doc.rust-lang.org`` → ``rust-lang.org``, ``a.b.co.uk`` → ``b.co.uk``,
from the Public Suffix List bundled with ``tldextract``, never fetched; without ``tldextract``, or for a host
the list has no suffix for (an IP address, ``localhost``), the host itself), and, when removed, with the entry
that matched (``rule``: ``file:line``). The run's per-domain counts (``stats.json`` ``domains``) come from
these annotations.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from transforms.base import ConfiguredStep, Doc, StepConfigError, annotate

STEP = "url_filter"
BLOCKED_DOMAIN = "blocked_domain"
BLOCKED_URL = "blocked_url"
NOT_ALLOWED = "not_allowed"

_LABEL = r"(?!-)[a-z0-9_-]{1,63}(?<!-)"
_DOMAIN_RE = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")


class UrlFilterConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enabled: bool | None = Field(None, description="run the URL filter; null (the default): on when block_list or "
                                                   "allow_list is given, else off. true without either list is an "
                                                   "error")
    block_list: str | None = Field(None, description="file of blocked entries, one per line: a domain (blocks it "
                                                     "and its subdomains), a URL prefix (https://example.com/ads/) "
                                                     "or a regex (re:...); '#' starts a comment line. Matches are "
                                                     "removed with reason blocked_domain or blocked_url")
    allow_list: str | None = Field(None, description="file in the block list's format; when given, a URL that "
                                                     "matches none of its entries is removed (reason not_allowed)")
    url_field: str = Field("url", min_length=1, description="the meta field holding the document's URL; documents "
                                                            "without it pass untouched")
    top_domains: int = Field(20, ge=0, description="stats.json 'domains' and the report list this many registered "
                                                   "domains, most documents first (the rest summed as 'other')")

    def active(self) -> bool:
        """Whether the step runs: explicitly enabled, or left to default with a list given."""
        if self.enabled is None:
            return bool(self.block_list or self.allow_list)
        return self.enabled


# --- the list files ------------------------------------------------------------------------------------------

class ListFormatError(ValueError):
    """A line of a block or allow list that is none of the three entry kinds; the message names file and line."""


def _idna(domain: str) -> str:
    try:
        return domain.encode("idna").decode("ascii")
    except UnicodeError:
        return domain


def normalize_host(host: str) -> str:
    """A host as the lists compare it: lower case, no trailing dot, IDNA (punycode) for non-ASCII."""
    host = host.strip().rstrip(".").lower()
    return host if host.isascii() else _idna(host)


@dataclass(frozen=True)
class Entry:
    kind: str     # "domain" | "prefix" | "regex"
    value: str    # the normalized domain or prefix, or the regex source
    where: str    # file:line


def _normalize_prefix(url: str) -> str | None:
    """``scheme://host...`` with scheme and host lower-cased (the rest as written), or None when it is not one."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if not parts.scheme or not parts.netloc:
        return None
    netloc = parts.netloc.lower()
    rest = url[len(parts.scheme) + 3 + len(parts.netloc):]
    return f"{parts.scheme.lower()}://{netloc}{rest}"


def parse_entry(text: str, where: str) -> Entry:
    """One list line (stripped, not a comment) as an ``Entry``; a ``ListFormatError`` naming ``where`` if it is
    none of the three kinds."""
    if text.startswith("re:"):
        pattern = text[3:]
        if not pattern:
            raise ListFormatError(f"{where}: 're:' without a pattern")
        try:
            re.compile(pattern)
        except re.error as err:
            raise ListFormatError(f"{where}: regex {pattern!r} does not compile: {err}") from None
        return Entry("regex", pattern, where)
    if any(c.isspace() for c in text):
        raise ListFormatError(f"{where}: {text!r} contains a space: an entry is one domain, URL prefix or re:regex")
    if "://" in text:
        prefix = _normalize_prefix(text)
        if prefix is None:
            raise ListFormatError(f"{where}: {text!r} is not a URL prefix (scheme://host/...)")
        return Entry("prefix", prefix, where)
    domain = text.removeprefix("*.").removeprefix(".")
    domain = normalize_host(domain)
    if "/" in domain or not _DOMAIN_RE.match(domain):
        hint = (f"; for a URL prefix write the scheme, e.g. https://{text}" if "/" in text else "")
        raise ListFormatError(f"{where}: {text!r} is not a domain, a URL prefix (scheme://host/...) or a regex "
                              f"(re:...){hint}")
    return Entry("domain", domain, where)


def read_list(path: str | Path) -> list[Entry]:
    """The entries of a list file; ``ListFormatError`` (file and line) for a bad line, ``FileNotFoundError`` for
    a missing file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ListFormatError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    entries = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        entries.append(parse_entry(stripped, f"{path}:{number}"))
    return entries


@dataclass
class Rules:
    """One list, compiled for matching: a set of domains (matched on every suffix of the host), prefixes grouped
    by their ``scheme://host`` part, and the regexes."""

    domains: dict[str, str] = field(default_factory=dict)              # domain -> where
    prefixes: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # scheme://host -> [(rest, where)]
    regexes: list[tuple[re.Pattern, str]] = field(default_factory=list)

    @classmethod
    def of(cls, entries: Sequence[Entry]) -> "Rules":
        rules = cls()
        for e in entries:
            if e.kind == "domain":
                rules.domains.setdefault(e.value, e.where)
            elif e.kind == "prefix":
                parts = urlsplit(e.value)
                origin = f"{parts.scheme}://{parts.netloc}"
                rules.prefixes.setdefault(origin, []).append((e.value[len(origin):], e.where))
            else:
                rules.regexes.append((re.compile(e.value), e.where))
        return rules

    def __len__(self) -> int:
        return len(self.domains) + sum(map(len, self.prefixes.values())) + len(self.regexes)

    def match_domain(self, host: str) -> str | None:
        """Where the domain entry that covers ``host`` (itself or a parent domain) was written, or None."""
        if not self.domains or not host:
            return None
        labels = host.split(".")
        for i in range(len(labels)):
            where = self.domains.get(".".join(labels[i:]))
            if where is not None:
                return where
        return None

    def match_url(self, url: str, origin: str, rest: str) -> str | None:
        """Where the prefix or regex entry that matches ``url`` was written, or None."""
        for prefix_rest, where in self.prefixes.get(origin, ()):
            if rest.startswith(prefix_rest):
                return where
        for pattern, where in self.regexes:
            if pattern.search(url):
                return where
        return None


@dataclass(frozen=True)
class ParsedUrl:
    url: str
    host: str     # normalized (lower case, IDNA), "" when the URL has none
    origin: str   # scheme://netloc, lower case ("" when unparseable)
    rest: str     # everything after the origin, as written


def parse_url(url: str) -> ParsedUrl:
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError:  # e.g. an unbalanced '[' of an IPv6 host: no host, the regexes still apply
        return ParsedUrl(url, "", "", url)
    if not parts.scheme or not parts.netloc:
        return ParsedUrl(url, normalize_host(host), "", url)
    origin = f"{parts.scheme.lower()}://{parts.netloc.lower()}"
    return ParsedUrl(url, normalize_host(host), origin, url[len(parts.scheme) + 3 + len(parts.netloc):])


# --- registered domains ---------------------------------------------------------------------------------------

_EXTRACTOR = None


def _extractor():
    """tldextract with its bundled Public Suffix List snapshot only: no download, no cache written; ``False``
    when tldextract is not installed (then a host is its own registered domain)."""
    global _EXTRACTOR
    if _EXTRACTOR is None:
        try:
            import tldextract  # optional: the registered-domain grouping falls back to the host without it
        except ImportError:
            _EXTRACTOR = False
        else:
            _EXTRACTOR = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None, fallback_to_snapshot=True)
    return _EXTRACTOR


def registered_domain(host: str) -> str:
    """``doc.rust-lang.org`` → ``rust-lang.org``, ``a.b.co.uk`` → ``b.co.uk``; a host without a public suffix
    (an IP address, ``localhost``) or, without tldextract, any host: the host itself; no host: ``""``."""
    if not host:
        return ""
    extract = _extractor()
    if not extract:
        return host
    result = extract.extract_str(host) if hasattr(extract, "extract_str") else extract(host)
    if result.suffix and result.domain:
        return f"{result.domain}.{result.suffix}".lower()
    return host


# --- the decision ---------------------------------------------------------------------------------------------

@dataclass
class UrlFilter:
    """The pure core: a URL in, ``(reason | None, rule | None)`` out."""

    block: Rules = field(default_factory=Rules)
    allow: Rules | None = None

    def decide(self, url: str) -> tuple[str | None, str | None, ParsedUrl]:
        parsed = parse_url(url)
        where = self.block.match_domain(parsed.host)
        if where is not None:
            return BLOCKED_DOMAIN, where, parsed
        where = self.block.match_url(url, parsed.origin, parsed.rest)
        if where is not None:
            return BLOCKED_URL, where, parsed
        if self.allow is not None:
            if self.allow.match_domain(parsed.host) is None and \
                    self.allow.match_url(url, parsed.origin, parsed.rest) is None:
                return NOT_ALLOWED, None, parsed
        return None, None, parsed


def _load(field_name: str, path: str) -> Rules:
    try:
        return Rules.of(read_list(path))
    except FileNotFoundError:
        raise StepConfigError(f"url_filter.{field_name}: {path} does not exist") from None
    except IsADirectoryError:
        raise StepConfigError(f"url_filter.{field_name}: {path} is a folder, not a list file") from None
    except ListFormatError as err:
        raise StepConfigError(f"url_filter.{field_name}: {err}") from None


def build_filter(cfg: UrlFilterConfig) -> UrlFilter:
    """Both lists read and compiled; a ``StepConfigError`` (one line: field, file, line) when one cannot be.
    Called when the graph is built, so workers get the compiled rules and never need the files."""
    if cfg.enabled and not (cfg.block_list or cfg.allow_list):
        raise StepConfigError("url_filter.enabled: true, but neither url_filter.block_list nor "
                              "url_filter.allow_list is given: nothing to filter by")
    block = _load("block_list", cfg.block_list) if cfg.block_list else Rules()
    allow = _load("allow_list", cfg.allow_list) if cfg.allow_list else None
    return UrlFilter(block, allow)


def check(cfg: UrlFilterConfig) -> None:
    build_filter(cfg)


def document_url(doc: Doc, url_field: str) -> str | None:
    meta = doc.get("meta")
    value = meta.get(url_field) if isinstance(meta, dict) else None
    return value.strip() if isinstance(value, str) and value.strip() else None


class UrlFilterStep(ConfiguredStep):
    """The step: annotates each document that has a URL with its registered domain, and removes the blocked
    and (with an allow list) the not-allowed ones."""

    name = STEP
    batch_size = 1024

    def __init__(self, cfg: UrlFilterConfig, rules: UrlFilter | None = None):
        super().__init__(cfg)
        self.rules = rules if rules is not None else build_filter(cfg)

    def apply(self, docs: Sequence[Doc]) -> list[str | None]:
        reasons: list[str | None] = []
        for doc in docs:
            url = document_url(doc, self.cfg.url_field)
            if url is None:
                reasons.append(None)
                continue
            reason, where, parsed = self.rules.decide(url)
            values = {"domain": registered_domain(parsed.host)}
            if where is not None:
                values["rule"] = where
            annotate(doc, self.name, **values)
            reasons.append(reason)
        return reasons


# --- per-domain counts ----------------------------------------------------------------------------------------

NO_URL = "(no url)"


class DomainTally:
    """Per registered domain: documents that entered the URL filter, kept at the end, removed (and by which
    step). Fed one document's annotations at a time (``add``), from docs/ and removed/."""

    def __init__(self) -> None:
        self.rows: dict[str, dict] = {}

    def add(self, annotations: dict | None, removed_by: str | None = None) -> None:
        domain = ((annotations or {}).get(STEP) or {}).get("domain")
        key = domain if domain is not None else NO_URL
        row = self.rows.setdefault(key, {"documents": 0, "kept": 0, "removed": 0, "removed_by": {}})
        row["documents"] += 1
        if removed_by is None:
            row["kept"] += 1
        else:
            row["removed"] += 1
            row["removed_by"][removed_by] = row["removed_by"].get(removed_by, 0) + 1

    def block(self, top: int) -> dict:
        """The ``stats.json`` ``domains`` block: the ``top`` domains by documents (ties by name), the rest summed
        as ``other``; documents without a URL apart (``without_url``), so the rows add up to every document."""
        no_url = self.rows.get(NO_URL)
        named = sorted(((d, r) for d, r in self.rows.items() if d != NO_URL), key=lambda kv: (-kv[1]["documents"],
                                                                                                kv[0]))
        shown, rest = named[:top], named[top:]
        other = {"domains": len(rest), "documents": 0, "kept": 0, "removed": 0}
        for _, r in rest:
            for key in ("documents", "kept", "removed"):
                other[key] += r[key]
        return {
            "top": top,
            "domains": len(named),
            "rows": [{"domain": d, **{k: (dict(sorted(v.items())) if k == "removed_by" else v)
                                      for k, v in r.items()}} for d, r in shown],
            "other": other,
            "without_url": {k: no_url[k] for k in ("documents", "kept", "removed")} if no_url else
            {"documents": 0, "kept": 0, "removed": 0},
        }
