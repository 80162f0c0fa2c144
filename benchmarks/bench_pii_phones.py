"""Phone numbers in the forms people write them, per supported region: recall, partial masks, false positives.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_pii_phones.py [--set tune|measure] [--per-format 6] [--show]

The probe is generated, not drawn from any evaluation set. The digits are random numbers that libphonenumber
calls *valid* for the region (fixed line and mobile), split into area code (national destination code) and
subscriber number by libphonenumber's own rules. They are then written in the formats the numbering plans and
writing standards document, for every region ``PiiConfig.phone_regions`` accepts:
  * DE/AT/CH: DIN 5008 ("030 12345678", "+49 30 12345678", extension "030 1234567-89") and the older forms still
    common ("(030) 12345678", "030/12345678", "030 / 123 456 78", "+49 (0)30 …", "(0 30) …");
  * GB: Ofcom's written forms by area-code length ("020 7946 0018", "0161 496 0123", "01632 960123",
    "(01632) 960123", "+44 (0)20 …");
  * US/CA: NANP ("(NPA) NXX-XXXX", "NPA-NXX-XXXX", "NPA.NXX.XXXX", "1-NPA-…", "+1 …", "x123" / "ext. 123");
  * CN landlines ("010-12345678", "(0755) 1234 5678", "（010）12345678", "+86 10 …", extension "…转123");
  * FR ("01 23 45 67 89", "01.23.45.67.89", "+33 (0)1 …"), IN ("011 2345 6789", "+91 98765 43210"),
    AU ("(02) 9876 5432", "0412 345 678", "+61 2 …").
Every form with and without a country code where people write it so; hyphens, dots, slashes, spaces and
parentheses as each plan uses them. Each number stands in a sentence of the region's language; the context
templates are split in two halves: ``tune`` (used while writing the rules) and ``measure`` (looked at only to
report), with different random digits (seeds 1 and 2).

Negatives (same for both sets, digits random per seed): dates, times and timestamps, versions, IPs, money in
English/German/French/Chinese notation, ISBNs, citations with a year in parentheses and page ranges, serial,
order and article numbers, postcodes, coordinates, file sizes, counts with thousands separators.

Scoring: a number is found when one PHONE_NUMBER or CN_MOBILE span covers all its digits; a span that overlaps
it without covering every digit is a *partial mask* (digits would leak) and counts as missed. A negative counts
as a false positive when any PHONE_NUMBER/CN_MOBILE span overlaps a number in it. System: corpusmill's
``PiiEngine`` (all entities, ner off: phones do not depend on NER).
"""
from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections import defaultdict
from pathlib import Path

import phonenumbers

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PHONE_TYPES = ("PHONE_NUMBER", "CN_MOBILE")

# Leading digits of the national significant number to sample from, per region and kind (fixed line, mobile).
LEADS = {
    "US": {"fixed": "23456789", "mobile": "23456789"},
    "CA": {"fixed": "24567", "mobile": "24567"},
    "GB": {"fixed": "12", "mobile": "7"},
    "DE": {"fixed": "23456789", "mobile": "1"},
    "AT": {"fixed": "12345", "mobile": "6"},
    "CH": {"fixed": "2345", "mobile": "7"},
    "CN": {"fixed": "23456789", "mobile": None},  # CN mobiles are CN_MOBILE's (11 digits), covered by its tests
    "FR": {"fixed": "12345", "mobile": "67"},
    "IN": {"fixed": "1234568", "mobile": "9876"},
    "AU": {"fixed": "2378", "mobile": "4"},
}
LENGTHS = {"US": (10,), "CA": (10,), "GB": (9, 10), "DE": (9, 10, 11), "AT": (8, 9, 10, 11),
           "CH": (9,), "CN": (10, 11), "FR": (9,), "IN": (10,), "AU": (9,)}
CC = {"US": 1, "CA": 1, "GB": 44, "DE": 49, "AT": 43, "CH": 41, "CN": 86, "FR": 33, "IN": 91, "AU": 61}
LANG = {"US": "en", "CA": "en", "GB": "en", "IN": "en", "AU": "en", "DE": "de", "AT": "de", "CH": "de",
        "CN": "zh", "FR": "fr"}


def valid_number(rng: random.Random, region: str, kind: str) -> tuple[str, str] | None:
    """(area code, subscriber number) of a random number libphonenumber calls valid for ``region``."""
    leads = LEADS[region][kind]
    if leads is None:
        return None
    for _ in range(5000):
        n = rng.choice(LENGTHS[region])
        nsn = rng.choice(leads) + "".join(rng.choice("0123456789") for _ in range(n - 1))
        try:
            num = phonenumbers.parse("+%d%s" % (CC[region], nsn), None)
        except phonenumbers.NumberParseException:
            continue
        if not phonenumbers.is_valid_number_for_region(num, region):
            continue
        ntype = phonenumbers.number_type(num)
        want_mobile = kind == "mobile"
        is_mobile = ntype in (phonenumbers.PhoneNumberType.MOBILE, phonenumbers.PhoneNumberType.FIXED_LINE_OR_MOBILE)
        if region not in ("US", "CA") and want_mobile != (ntype == phonenumbers.PhoneNumberType.MOBILE):
            continue
        if not want_mobile and is_mobile and region not in ("US", "CA"):
            continue
        ndc = phonenumbers.length_of_geographical_area_code(num) or phonenumbers.length_of_national_destination_code(num)
        if not 1 <= ndc < len(nsn) - 2:
            continue
        return nsn[:ndc], nsn[ndc:]
    return None


def groups(digits: str, sizes: tuple[int, ...]) -> list[str]:
    """``digits`` cut into groups of ``sizes``; a remainder of one or two digits joins the last group."""
    out, i = [], 0
    for s in sizes:
        if len(digits) - i < s + 3:  # what is left would make a group of one or two: keep it in this one
            break
        out.append(digits[i:i + s])
        i += s
    out.append(digits[i:])
    return out


def pairs(digits: str) -> str:
    """DIN 5008 (before 2011) and French style: pairs from the right ("1 23 45 67")."""
    g = []
    while len(digits) > 2:
        g.insert(0, digits[-2:])
        digits = digits[:-2]
    return " ".join([digits] + g)


def formats(region: str, area: str, sub: str, ext: str) -> dict[str, str]:
    """Every written form of one number the region's numbering plan or writing standard documents."""
    cc = CC[region]
    if region in ("US", "CA"):
        nxx, line = sub[:3], sub[3:]
        return {
            "paren": f"({area}) {nxx}-{line}", "paren_tight": f"({area}){nxx}-{line}",
            "hyphen": f"{area}-{nxx}-{line}", "dots": f"{area}.{nxx}.{line}", "spaces": f"{area} {nxx} {line}",
            "slash": f"{area}/{nxx}-{line}", "one_hyphen": f"1-{area}-{nxx}-{line}",
            "one_paren": f"1 ({area}) {nxx}-{line}", "intl_spaces": f"+1 {area} {nxx} {line}",
            "intl_hyphen": f"+1-{area}-{nxx}-{line}", "intl_paren": f"+1 ({area}) {nxx}-{line}",
            "intl_dots": f"+1.{area}.{nxx}.{line}", "e164": f"+1{area}{sub}", "ext_word": f"({area}) {nxx}-{line} ext. {ext}",
            "ext_x": f"{area}-{nxx}-{line} x{ext}", "ext_x_paren": f"({area}){nxx}-{line}x{ext}",
        }
    trunk = "0"
    f = {
        "spaces": f"{trunk}{area} {sub}",
        "paren": f"({trunk}{area}) {sub}",
        "paren_tight": f"({trunk}{area}){sub}",
        "slash": f"{trunk}{area}/{sub}",
        "slash_spaced": f"{trunk}{area} / {sub}",
        "hyphen": f"{trunk}{area}-{sub}",
        "grouped": f"{trunk}{area} " + " ".join(groups(sub, (3, 3, 3) if len(sub) > 6 else (3, 3))),
        "paren_grouped": f"({trunk}{area}) " + " ".join(groups(sub, (4, 4) if len(sub) >= 7 else (3, 3))),
        "intl": f"+{cc} {area} {sub}",
        "intl_trunk": f"+{cc} (0){area} {sub}",
        "intl_trunk_spaced": f"+{cc} (0) {area} {sub}",
        "intl_hyphen": f"+{cc}-{area}-{sub}",
        "intl_00": f"00{cc} {area} {sub}",
        "e164": f"+{cc}{area}{sub}",
    }
    if region in ("DE", "AT", "CH"):
        f.update({
            "din_ext": f"{trunk}{area} {sub}-{ext[:2]}",
            "din_intl_ext": f"+{cc} {area} {sub}-{ext[:2]}",
            "pairs": f"{trunk}{area} {pairs(sub)}",
            "paren_pairs": f"({pairs(trunk + area)}) {pairs(sub)}",
            "slash_pairs": f"{trunk}{area}/{pairs(sub)}",
        })
    if region == "GB":
        f.update({"ext_word": f"{trunk}{area} {sub} ext. {ext}", "intl_trunk_tight": f"+44(0){area} {sub}"})
    if region == "CN":
        f.update({
            "fullwidth_paren": f"（{trunk}{area}）{sub}",
            "ext_zhuan": f"{trunk}{area}-{sub}转{ext}",
            "grouped": f"{trunk}{area} " + " ".join(groups(sub, (4, 4))),
            "intl": f"+86 {area} {sub[:4]} {sub[4:]}",
        })
    if region == "FR":
        f.update({"pairs": f"{trunk}{area} {pairs(sub)}", "dots": ".".join((trunk + area + " " + pairs(sub)).split()),
                  "intl_pairs": f"+33 {area} {pairs(sub)}", "intl_trunk_pairs": f"+33 (0){area} {pairs(sub)}"})
    if region == "AU":
        f.update({"paren_grouped": f"(0{area}) {sub[:4]} {sub[4:]}"})
    return f


# Context templates per language: {} is the number. Even indices are the tune half, odd ones the measure half.
CONTEXTS = {
    "en": ["Call me on {} after six.", "Phone: {}", "For bookings ring {} (weekdays).", "Tel. {}",
           "You can reach the office at {}, Monday to Friday.", "Contact: {}", "Please call {} to reschedule.",
           "Mobile {} / landline preferred", "The helpline number is {}.", "Fax: {}",
           "My number is {} if anything comes up.", "Questions? Dial {} and ask for billing.",
           "Reception {}", "Leave a message at {} and we will call you back."],
    "de": ["Rufen Sie uns unter {} an.", "Telefon: {}", "Tel. {}", "Sie erreichen mich unter {} ab 9 Uhr.",
           "Rückfragen bitte an {}.", "Fax: {}", "Telefonnummer: {}", "Anmeldung telefonisch unter {} oder per Post.",
           "Mobil {}", "Die Zentrale ist unter {} erreichbar.", "Bei Störungen: {}",
           "Meine Nummer ist {}, ruf einfach an.", "Tel.: {} (Sekretariat)", "Hotline {} – Mo bis Fr"],
    "zh": ["联系电话：{}", "请拨打{}咨询。", "电话 {}", "如有问题请致电{}。", "传真：{}", "办公室电话是{}，工作日接听。",
           "客服热线{}", "预约请打{}。", "座机：{}", "报修电话：{}（24小时）", "总机 {}", "咨询电话{}，欢迎来电。"],
    "fr": ["Appelez-nous au {}.", "Tél. : {}", "Téléphone : {}", "Vous pouvez me joindre au {} le matin.",
           "Fax : {}", "Renseignements au {}.", "Standard : {}", "Mon numéro est le {}."],
}

# Negatives: each a format string filled with random digits ({d4} four digits, {y} a year, ...).
NEGATIVES = [
    "The meeting is on {y}-{m}-{dd} at {hh}:{mm}.", "Released {dd}.{m}.{y}, build {d4}.", "Version {v1}.{v2}.{v3} fixes the leak.",
    "Upgrade to v{v1}.{v2}.{v3}-rc{v1} before {m}/{dd}/{y}.", "The server at {ip} answered in {d3} ms.",
    "Total: ${d3},{d3}.{d2} incl. tax", "Preis: {d3}.{d3},{d2} EUR", "Le prix est de {d3} {d3} € TTC.",
    "ISBN 978-3-{d2}-{d6}-{n}", "ISBN {n}-{d3}-{d5}-{n}", "Smith et al. ({y}) {d3}–{d3}.",
    "Nature {d3} ({y}) {d4}-{d4}", "J. Phys. ({y}) {d5}", "Timestamp {y}-{m}-{dd}T{hh}:{mm}:{ss}Z, id {d6}",
    "Log: {y}-{m}-{dd} {hh}:{mm}:{ss}.{d3} worker {d2} started", "Serial no. {d4}-{d4}-{d4}",
    "Order {d3}-{d7}-{d7}", "Artikel-Nr. {d3} {d3} {d2}", "Rechnung Nr. {d4}/{y}", "PLZ {d5} Berlin, {d4} Einwohner",
    "Es kamen {d3} {d3} Besucher ({y}).", "Population: {d1},{d3},{d3} (census {y})", "Koordinaten {d2}.{d6}, {d2}.{d6}",
    "Die Datei ist {d3} {d3} {d3} Bytes groß.", "Zeitraum {dd}.{m}.{y} – {dd}.{m}.{y}", "Seiten {d3}-{d3}",
    "The range {y}–{y} saw {d3} {d3} cases.", "Matrix sizes (1024) 2048 4096 were tested.",
    "Kernel {v1}.{v2}.{d2}-{d3}-generic", "IPv6 fe80::{h4}:{h4}:{h4}:{h4}", "Commit {h4}{h4}{h4} on {y}/{m}/{dd}",
    "订单号：{d4}{d4}{d4}{d4}", "发布日期：{y}-{m}-{dd} {hh}:{mm}", "价格：{d4}.{d2}元，库存{d3}件", "版本号 {v1}.{v2}.{v3}",
    "人口约{d4}万（{y}年）", "邮编 {d6}", "第{d3}-{d3}页", "会议时间{y}年{m}月{dd}日，编号({d4}) {d5}",
    "Rang {d1} von {d5} Teilnehmern mit {d3},{d2} Punkten", "Account {d8}, sort code {d2}-{d2}-{d2}",
    "Score ({d2}) {d4} {d4}", "Fig. ({d1}) {d5} units", "Page {d2} of {d3} (printed {dd}/{m}/{y})",
]


def fill(tmpl: str, rng: random.Random) -> str:
    def digits(n):
        return str(rng.randint(1, 9)) + "".join(rng.choice("0123456789") for _ in range(n - 1))
    rep = {"y": lambda: str(rng.randint(1950, 2030)), "m": lambda: "%02d" % rng.randint(1, 12),
           "dd": lambda: "%02d" % rng.randint(1, 28), "hh": lambda: "%02d" % rng.randint(0, 23),
           "mm": lambda: "%02d" % rng.randint(0, 59), "ss": lambda: "%02d" % rng.randint(0, 59),
           "v1": lambda: str(rng.randint(1, 12)), "v2": lambda: str(rng.randint(0, 30)), "v3": lambda: str(rng.randint(0, 99)),
           "ip": lambda: ".".join(str(rng.randint(1, 254)) for _ in range(4)), "n": lambda: str(rng.randint(0, 9)),
           "h4": lambda: "%04x" % rng.randint(0, 65535)}
    return re.sub(r"\{(\w+)\}", lambda m: rep[m.group(1)]() if m.group(1) in rep else digits(int(m.group(1)[1:])), tmpl)


def build(which: str, per_format: int) -> tuple[list[dict], list[dict]]:
    seed = {"tune": 1, "measure": 2}[which]
    rng = random.Random(seed)
    half = 0 if which == "tune" else 1
    positives = []
    for region in LEADS:
        lang = LANG[region]
        ctx = CONTEXTS[lang][half::2]
        for kind in ("fixed", "mobile"):
            for _ in range(per_format):
                got = valid_number(rng, region, kind)
                if got is None:
                    continue
                area, sub = got
                ext = str(rng.randint(10, 9999))
                for fmt, value in formats(region, area, sub, ext).items():
                    text = rng.choice(ctx)
                    positives.append({"region": region, "kind": kind, "format": fmt, "value": value,
                                      "text": text.replace("{}", value), "start": text.index("{}")})
    negatives = [{"text": fill(t, rng)} for t in NEGATIVES for _ in range(per_format)]
    return positives, negatives


def run(positives, negatives) -> dict:
    from transforms.pii import PiiConfig
    from transforms.pii.step import PiiEngine

    eng = PiiEngine(PiiConfig(ner="off"))
    pos_spans = eng.analyze([p["text"] for p in positives])
    neg_spans = eng.analyze([n["text"] for n in negatives])
    per = defaultdict(lambda: {"found": 0, "n": 0, "partial": 0, "missed": []})
    for p, spans in zip(positives, pos_spans):
        lo, hi = p["start"], p["start"] + len(p["value"])
        digit_pos = [i for i in range(lo, hi) if p["text"][i].isdigit()]
        phones = [s for s in spans if s.entity_type in PHONE_TYPES and s.start < hi and lo < s.end]
        whole = any(all(s.start <= i < s.end for i in digit_pos) for s in phones)
        for key in (p["region"], (p["region"], p["format"])):
            c = per[key]
            c["n"] += 1
            c["found"] += whole
            c["partial"] += bool(phones) and not whole
            if not whole and isinstance(key, str):
                c["missed"].append(p["text"])
    fps = []
    for n, spans in zip(negatives, neg_spans):
        hits = [n["text"][s.start:s.end] for s in spans if s.entity_type in PHONE_TYPES]
        if hits:
            fps.append((n["text"], hits))
    return {"per": per, "fps": fps, "negatives": len(negatives)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--set", choices=("tune", "measure"), default="measure")
    ap.add_argument("--per-format", type=int, default=6, help="numbers per region and kind (each in every format)")
    ap.add_argument("--show", action="store_true", help="list misses and false positives")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "out" / "bench_pii_phones.json")
    args = ap.parse_args(argv)
    positives, negatives = build(args.set, args.per_format)
    res = run(positives, negatives)
    per = res["per"]
    rows = ["| region | recall | partial masks | worst format |", "|---|---|---|---|"]
    tot = [0, 0, 0]
    for region in LEADS:
        c = per[region]
        fmts = [(per[k]["found"] / per[k]["n"], k[1]) for k in per if isinstance(k, tuple) and k[0] == region]
        worst = min(fmts)
        rows.append(f"| {region} | {c['found'] / c['n']:.3f} ({c['found']}/{c['n']}) | {c['partial']} | "
                    f"{worst[1]} {worst[0]:.2f} |")
        tot = [tot[0] + c["found"], tot[1] + c["n"], tot[2] + c["partial"]]
        if args.show:
            for t in c["missed"]:
                print("MISS", region, t, file=sys.stderr)
    rows.append(f"| all | {tot[0] / tot[1]:.3f} ({tot[0]}/{tot[1]}) | {tot[2]} | |")
    rows.append(f"\nnegatives with a phone span: {len(res['fps'])}/{res['negatives']}")
    if args.show:
        for t, hits in res["fps"]:
            print("FP", t, hits, file=sys.stderr)
    print(f"set: {args.set}")
    print("\n".join(rows))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"set": args.set, "per": {str(k): {kk: vv for kk, vv in v.items() if kk != "missed"}
                                                             for k, v in per.items()},
                                    "fps": res["fps"], "negatives": res["negatives"]}, ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
