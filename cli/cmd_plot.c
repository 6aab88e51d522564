/* skiplm plot: training and validation loss curves of one or more runs (their log.jsonl),
 * overlaid in one hand-written SVG: axes with ticks, a legend with the run names, train
 * loss as a thin line (optionally smoothed), validation loss as a dashed line with dots. */
#include "cli.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    char name[128];
    int n, nv;
    double *x, *y;           /* train loss per step (x = step or tokens) */
    double *vx, *vy;         /* validation loss */
} run;

static double num_after(const char *line, const char *key, int *found) {
    const char *p = strstr(line, key);
    *found = p != NULL;
    return p ? strtod(p + strlen(key), NULL) : 0;
}

static int load_run(run *r, const char *arg, int use_tokens) {
    char path[4096];
    struct stat s;
    memset(r, 0, sizeof *r);
    /* NAME=RUN names the curve (when RUN exists and the whole argument does not) */
    const char *eq = strchr(arg, '=');
    char label[128] = "";
    if (eq && eq > arg && (size_t)(eq - arg) < sizeof label && stat(arg, &s) && !stat(eq + 1, &s)) {
        memcpy(label, arg, (size_t)(eq - arg));
        label[eq - arg] = 0;
        arg = eq + 1;
    }
    if (stat(arg, &s)) return sk_error(SK_EIO, "%s: %s", arg, strerror(errno));
    if (S_ISDIR(s.st_mode)) snprintf(path, sizeof path, "%s/log.jsonl", arg);
    else snprintf(path, sizeof path, "%s", arg);
    /* name: the run directory's name */
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", S_ISDIR(s.st_mode) ? arg : path);
    size_t L = strlen(tmp);
    while (L > 1 && tmp[L - 1] == '/') tmp[--L] = 0;
    if (!S_ISDIR(s.st_mode)) {
        char *sl = strrchr(tmp, '/');
        if (sl && !strcmp(sl + 1, "log.jsonl")) *sl = 0;
        else if (!sl && !strcmp(tmp, "log.jsonl")) snprintf(tmp, sizeof tmp, ".");
    }
    const char *base = strrchr(tmp, '/');
    snprintf(r->name, sizeof r->name, "%.*s", (int)sizeof r->name - 1, label[0] ? label : base ? base + 1 : tmp);
    char *data; size_t len;
    if (cli_read_file(path, &data, &len)) return SK_EIO;
    size_t cap = 1;
    for (size_t i = 0; i < len; i++) cap += data[i] == '\n';
    r->x = malloc(cap * sizeof(double)); r->y = malloc(cap * sizeof(double));
    r->vx = malloc(cap * sizeof(double)); r->vy = malloc(cap * sizeof(double));
    for (char *line = data; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        int f1, f2, f3, f4, f5;
        double step = num_after(line, "\"step\":", &f1), loss = num_after(line, "\"loss\":", &f2);
        double tok = num_after(line, "\"tokens\":", &f3), val = num_after(line, "\"val_loss\":", &f4);
        num_after(line, "\"skipped\":1", &f5);
        double x = use_tokens ? tok : step;
        if (f1 && f2 && (!use_tokens || f3) && !f5 && loss >= 0 && isfinite(loss)) { r->x[r->n] = x; r->y[r->n++] = loss; }
        if (f1 && f4 && isfinite(val) && (!use_tokens || f3)) { r->vx[r->nv] = x; r->vy[r->nv++] = val; }
        line = nl ? nl + 1 : NULL;
    }
    free(data);
    if (r->n == 0 && r->nv == 0) return sk_error(SK_EFORMAT, "%s: no training log lines (expected JSON lines with \"step\" and \"loss\")", path);
    return SK_OK;
}

/* A "nice" tick step (1, 2 or 5 times a power of ten) for about n ticks over range. */
static double nice_step(double range, int n) {
    double raw = range / n, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

static void fmt_num(double v, double step, char *buf, size_t n) {
    if (fabs(v) >= 1e6 && step >= 1e5) snprintf(buf, n, "%gM", v / 1e6);
    else if (fabs(v) >= 1e4 && step >= 1e3) snprintf(buf, n, "%gk", v / 1e3);
    else if (step >= 1) snprintf(buf, n, "%.0f", v);
    else { int d = (int)ceil(-log10(step)); snprintf(buf, n, "%.*f", d, v); }
}

static void xml_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f); else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f); else if (*s == '"') fputs("&quot;", f);
        else fputc(*s, f);
    }
}

int cmd_plot(int argc, char **argv) {
    const char *out = "curves.svg", *title = NULL, *xaxis = "steps";
    float smooth = 0, ymax_opt = 0;
    int W = 960, H = 560;
    cli_opt opts[] = {
        {"out", 's', &out, "SVG file to write (curves.svg); -o works too"},
        {"smooth", 'f', &smooth, "exponential smoothing of the train loss, 0..0.999 (0 = raw)"},
        {"x", 's', &xaxis, "x axis: steps | tokens (steps)"},
        {"title", 's', &title, "title (the run names)"},
        {"ymax", 'f', &ymax_opt, "upper end of the loss axis (auto)"},
        {"width", 'i', &W, "width in pixels (960)"},
        {"height", 'i', &H, "height in pixels (560)"},
        {0},
    };
    char **av = malloc(sizeof(char *) * (argc + 1));
    for (int i = 0; i < argc; i++) av[i] = !strcmp(argv[i], "-o") ? "--out" : argv[i];
    av[argc] = NULL;
    char *pos[64]; int np;
    int rc = cli_parse(argc, av, "plot", "[NAME=]RUN_DIR_OR_LOG... [-o curves.svg] [options]", opts, pos, 64, &np, NULL, NULL);
    free(av);
    if (rc) return rc == 1 ? 0 : rc;
    if (np < 1) { fprintf(stderr, "skiplm plot: give at least one run directory or log.jsonl\n"); return 2; }
    if (!(smooth >= 0 && smooth < 1)) { fprintf(stderr, "skiplm plot: --smooth must be in [0, 1)\n"); return 2; }
    if (strcmp(xaxis, "steps") && strcmp(xaxis, "tokens")) { fprintf(stderr, "skiplm plot: --x must be steps or tokens\n"); return 2; }
    if (W < 300 || H < 200 || W > 10000 || H > 10000) { fprintf(stderr, "skiplm plot: --width/--height out of range\n"); return 2; }
    int use_tokens = !strcmp(xaxis, "tokens");
    run *runs = calloc(np, sizeof *runs);
    for (int i = 0; i < np; i++)
        if (load_run(&runs[i], pos[i], use_tokens)) {
            cli_fail("plot");
            for (int j = 0; j <= i; j++) { free(runs[j].x); free(runs[j].y); free(runs[j].vx); free(runs[j].vy); }
            free(runs);
            return 1;
        }
    /* smoothing (EMA with bias correction, like TensorBoard) */
    for (int i = 0; i < np && smooth > 0; i++) {
        double ema = 0, w = 0;
        for (int k = 0; k < runs[i].n; k++) {
            ema = smooth * ema + (1 - smooth) * runs[i].y[k];
            w = smooth * w + (1 - smooth);
            runs[i].y[k] = ema / w;
        }
    }
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (int i = 0; i < np; i++) {
        for (int k = 0; k < runs[i].n; k++) {
            x0 = fmin(x0, runs[i].x[k]); x1 = fmax(x1, runs[i].x[k]);
            y0 = fmin(y0, runs[i].y[k]); y1 = fmax(y1, runs[i].y[k]);
        }
        for (int k = 0; k < runs[i].nv; k++) {
            x0 = fmin(x0, runs[i].vx[k]); x1 = fmax(x1, runs[i].vx[k]);
            y0 = fmin(y0, runs[i].vy[k]); y1 = fmax(y1, runs[i].vy[k]);
        }
    }
    if (ymax_opt > 0 && ymax_opt > y0) y1 = ymax_opt;
    if (x1 <= x0) x1 = x0 + 1;
    if (y1 <= y0) { y0 -= 0.5; y1 += 0.5; }
    double xs = nice_step(x1 - x0, 8), ys = nice_step(y1 - y0, 6);
    x0 = floor(x0 / xs) * xs; x1 = ceil(x1 / xs) * xs;
    y0 = floor(y0 / ys) * ys; y1 = ceil(y1 / ys) * ys;
    const int ml = 70, mr = 200, mt = 44, mb = 56;
    const double pw = W - ml - mr, ph = H - mt - mb;
#define PX(v) (ml + ((v) - x0) / (x1 - x0) * pw)
#define PY(v) (mt + (1 - (fmin(v, y1) - y0) / (y1 - y0)) * ph)
    static const char *COL[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"};
    char tmp_path[4200];
    snprintf(tmp_path, sizeof tmp_path, "%s", out);
    char *buf = NULL; size_t blen = 0;
    FILE *f = open_memstream(&buf, &blen);
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n", W, H, W, H);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
    fprintf(f, "<text x=\"%d\" y=\"26\" font-size=\"15\" font-weight=\"bold\">", ml);
    if (title) xml_text(f, title);
    else {
        fputs("loss: ", f);
        for (int i = 0; i < np; i++) { if (i) fputs(" vs ", f); xml_text(f, runs[i].name); }
    }
    fputs("</text>\n", f);
    /* grid and ticks */
    char lab[64];
    for (double v = x0; v <= x1 + xs * 1e-9; v += xs) {
        double px = PX(v);
        fmt_num(v, xs, lab, sizeof lab);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>\n", px, mt, px, mt + ph);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", px, mt + ph, px, mt + ph + 5);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", px, mt + ph + 19, lab);
    }
    for (double v = y0; v <= y1 + ys * 1e-9; v += ys) {
        double py = PY(v);
        fmt_num(v, ys, lab, sizeof lab);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>\n", ml, py, ml + pw, py);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"black\"/>\n", ml - 5, py, ml, py);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", ml - 8, py + 4, lab);
    }
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"black\"/>\n", ml, mt, pw, ph);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", ml + pw / 2, H - 12, use_tokens ? "tokens" : "step");
    fprintf(f, "<text transform=\"translate(18 %.1f) rotate(-90)\" text-anchor=\"middle\">loss</text>\n", mt + ph / 2);
    /* curves, clipped to the plot area */
    fprintf(f, "<clipPath id=\"area\"><rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%.1f\"/></clipPath>\n<g clip-path=\"url(#area)\">\n", ml, mt, pw, ph);
    for (int i = 0; i < np; i++) {
        const run *r = &runs[i];
        const char *c = COL[i % 8];
        int stride = r->n > 3000 ? r->n / 3000 : 1;
        if (r->n) {
            fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.2\" stroke-opacity=\"%s\" points=\"", c, r->nv ? "0.55" : "0.9");
            for (int k = 0; k < r->n; k += stride) fprintf(f, "%.1f,%.1f ", PX(r->x[k]), PY(r->y[k]));
            fprintf(f, "%.1f,%.1f\"/>\n", PX(r->x[r->n - 1]), PY(r->y[r->n - 1]));
        }
        if (r->nv) {
            fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2.2\" stroke-dasharray=\"7 4\" points=\"", c);
            for (int k = 0; k < r->nv; k++) fprintf(f, "%.1f,%.1f ", PX(r->vx[k]), PY(r->vy[k]));
            fputs("\"/>\n", f);
            for (int k = 0; k < r->nv; k++)
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", PX(r->vx[k]), PY(r->vy[k]), c);
        }
    }
    fputs("</g>\n", f);
    /* legend */
    int lx = ml + (int)pw + 16, ly = mt + 8;
    for (int i = 0; i < np; i++) {
        const run *r = &runs[i];
        const char *c = COL[i % 8];
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-weight=\"bold\">", lx, ly + 4);
        xml_text(f, r->name);
        fputs("</text>\n", f);
        ly += 18;
        if (r->n) {
            fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"/>", lx, ly, lx + 26, ly, c);
            fprintf(f, "<text x=\"%d\" y=\"%d\">train%s %.4f</text>\n", lx + 32, ly + 4, smooth > 0 ? " (smoothed)" : "", r->y[r->n - 1]);
            ly += 17;
        }
        if (r->nv) {
            fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2.2\" stroke-dasharray=\"7 4\"/>", lx, ly, lx + 26, ly, c);
            fprintf(f, "<circle cx=\"%d\" cy=\"%d\" r=\"3\" fill=\"%s\"/>", lx + 13, ly, c);
            fprintf(f, "<text x=\"%d\" y=\"%d\">val %.4f</text>\n", lx + 32, ly + 4, r->vy[r->nv - 1]);
            ly += 17;
        }
        ly += 10;
    }
    fputs("</svg>\n", f);
    fclose(f);
    rc = sk_write_atomic(out, buf, blen);
    free(buf);
    for (int i = 0; i < np; i++) { free(runs[i].x); free(runs[i].y); free(runs[i].vx); free(runs[i].vy); }
    free(runs);
    if (rc) return cli_fail("plot");
    fprintf(stderr, "skiplm plot: wrote %s (%d run%s)\n", out, np, np > 1 ? "s" : "");
    return 0;
#undef PX
#undef PY
}
