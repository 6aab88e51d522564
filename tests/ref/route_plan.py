"""Reference Skip-Layer routing plan, written from /work/shared/SPEC.md section 1 (the
paper's rule) and docs/models.md ("Routing tables"), independently of src/core/route.c.

plan(cfg) takes a dict of config fields (n_layer, n_head, n_kv_head, n_embd, n_skip_layer,
n_skip_head, routing) and returns the plan as tests/tool_route.c prints it (src, runs, stored,
slot, n_store, lends, lend_index, n_lenders, kv_bytes, cols, lines), or raises RouteError for a
config the rules refuse (the message is not modelled: tests compare messages separately).
"""
import re


class RouteError(ValueError):
    pass


def paper_sources(L, H, nl, nh):
    """SPEC 1: layer l >= n_l sends heads i >= H - n_h to the OWN K/V of layer l - n_l;
    n_l == 0, n_h == 0 or n_l >= L: no layer skips."""
    src = [[l] * H for l in range(L)]
    if nl > 0 and nh > 0 and nl < L:
        for l in range(nl, L):
            for i in range(H - nh, H):
                src[l][i] = l - nl
    return src


NUM = r"(\d+)"


def table_sources(L, H, table):
    """docs/models.md: "LAYERS:HEADS=SRC;..." with LAYERS '*' or a comma list of layers and
    ranges, HEADS '*' or a head or range, SRC -k (k >= 1 layers below) or @j (layer j at or
    below); later rules override earlier ones; with '*' layers a relative source below layer 0
    leaves that layer alone, an explicit layer must have a valid source."""
    src = [[l] * H for l in range(L)]
    rules = table.split(";")
    if rules and rules[-1] == "" and len(rules) > 1:
        rules.pop()                        # one trailing ';' ends the table
    for rule in rules:
        m = re.fullmatch(r"(\*|[\d,\-]+):(\*|\d+(?:-\d+)?)=([-@])(\d+)", rule)
        if not m:
            raise RouteError(f"rule {rule!r} does not parse")
        lay, heads, kind, k = m.group(1), m.group(2), m.group(3), int(m.group(4))
        star = lay == "*"
        if star:
            layers = list(range(L))
        else:
            layers = []
            for item in lay.split(","):
                im = re.fullmatch(r"(\d+)(?:-(\d+))?", item)
                if not im:
                    raise RouteError(f"layer item {item!r}")
                a = int(im.group(1))
                b = int(im.group(2)) if im.group(2) is not None else a
                if a > b or b >= L:
                    raise RouteError(f"layers {a}-{b} outside [0, {L})")
                layers += range(a, b + 1)
        if heads == "*":
            h0, h1 = 0, H - 1
        else:
            hm = heads.split("-")
            h0 = int(hm[0])
            h1 = int(hm[1]) if len(hm) > 1 else h0
            if h0 > h1 or h1 >= H:
                raise RouteError(f"heads {h0}-{h1} outside [0, {H})")
        rel = kind == "-"
        if rel and k < 1:
            raise RouteError("bad source")
        for l in sorted(set(layers)):
            s = l - k if rel else k
            if s < 0 or s > l:
                if star and rel:
                    continue
                raise RouteError(f"layer {l} cannot read layer {s}")
            for h in range(h0, h1 + 1):
                src[l][h] = s
    return src


def sources(cfg):
    L, H = cfg["n_layer"], cfg["n_head"]
    Hkv = cfg.get("n_kv_head") or H
    nl, nh = cfg.get("n_skip_layer", 0), cfg.get("n_skip_head", 0)
    table = cfg.get("routing", "").replace(" ", "")
    group = H // Hkv
    if nh > H or nh % group:
        raise RouteError("n_skip_head")
    if table and (nl or nh):
        raise RouteError("routing and n_skip_*")
    src = table_sources(L, H, table) if table else paper_sources(L, H, nl, nh)
    # SPEC 1 with GQA: a KV group's query heads read one layer
    for l in range(L):
        for h in range(H):
            if src[l][h] != src[l][h // group * group]:
                raise RouteError(f"layer {l}: heads of one KV group read different layers")
    return src


def ranges(xs):
    """[(a, b)] of the runs of consecutive integers in the sorted list xs"""
    out = []
    for x in xs:
        if out and out[-1][1] == x - 1:
            out[-1][1] = x
        else:
            out.append([x, x])
    return out


def fmt_ranges(rs):
    return ",".join(f"{a}-{b}" if b > a else f"{a}" for a, b in rs)


def plan(cfg):
    L, H = cfg["n_layer"], cfg["n_head"]
    Hkv = cfg.get("n_kv_head") or H
    C = cfg.get("n_embd", 128)
    hs, group = C // H, H // Hkv
    src = sources(cfg)
    # runs: consecutive query heads with one source (one attention call each)
    runs = []
    for l in range(L):
        r = []
        for h in range(H):
            if r and r[-1][2] == src[l][h]:
                r[-1][1] += 1
            else:
                r.append([h, 1, src[l][h]])
        runs.append(r)
    # stored: KV head j of layer l is read by some query head of some layer (its own included);
    # lends: some OTHER layer reads layer l (only its own K/V: borrowing never chains)
    stored = [[0] * Hkv for _ in range(L)]
    lends = [0] * L
    for u in range(L):
        for h in range(H):
            s = src[u][h]
            stored[s][h // group] = 1
            if s != u:
                lends[s] = 1
    slot, n_store = [], []
    for l in range(L):
        k, row = 0, []
        for j in range(Hkv):
            row.append(k if stored[l][j] else -1)
            k += stored[l][j]
        slot.append(row)
        n_store.append(k)
    lend_index, n = [], 0
    for l in range(L):
        lend_index.append(n if lends[l] else -1)
        n += lends[l]
    # fused q/k/v columns: q (H hs), then K (Hkv hs), then V (Hkv hs); all of q, and the K
    # and V columns of the stored KV heads, touching ranges merged
    cols = []
    for l in range(L):
        c = [[0, H * hs]]
        for base in (H, H + Hkv):
            for a, b in ranges([j for j in range(Hkv) if stored[l][j]]):
                c0, w = (base + a) * hs, (b - a + 1) * hs
                if c[-1][0] + c[-1][1] == c0:
                    c[-1][1] += w
                else:
                    c.append([c0, w])
        cols.append(c)
    kv_bytes = [2 * n_store[l] * hs * 4 for l in range(L)]
    lines = []
    for l in range(L):
        s = ", ".join(f"heads {fmt_ranges([[h0, h0 + nh - 1]])} -> layer {sl}" for h0, nh, sl in runs[l])
        st = [j for j in range(Hkv) if stored[l][j]]
        s += "; stores " + (f"K/V heads {fmt_ranges(ranges(st))}" if st else "no K/V")
        s += f" ({kv_bytes[l]} bytes per token)"
        if lends[l]:
            s += "; lends K/V"
        lines.append(s)
    return dict(src=src, runs=runs, stored=stored, slot=slot, n_store=n_store, lends=lends,
                lend_index=lend_index, n_lenders=n, kv_bytes=kv_bytes, cols=cols, lines=lines)
