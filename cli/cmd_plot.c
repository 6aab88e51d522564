/* skiplm plot: training and validation loss curves of one or more runs (their log.jsonl),
 * overlaid in one hand-written SVG: axes with ticks, a legend with the run names, train
 * loss as a thin line (optionally smoothed), validation loss as a dashed line with dots.
 * In order: the command line (parse_opts), each run's log (load_runs), the axes (make_axes),
 * then the SVG (write_svg: head, axes, curves, legend). */
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
    char *end = NULL;
    double v = p ? strtod(p + strlen(key), &end) : 0;
    *found = p != NULL && end != p + strlen(key);      /* "val_loss":null is no value */
    return v;
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

/* The command line. */
typedef struct {
    const char *out, *title, *xaxis;
    float smooth, ymax;
    int W, H, use_tokens;
    char **args;                   /* [NAME=]RUN_DIR_OR_LOG..., n_runs of them */
    int n_runs;
} plot_opts;

/* The axes: the data range rounded out to whole ticks, the margins and the plot area. */
typedef struct {
    double x0, x1, y0, y1, xs, ys; /* xs, ys: the tick steps */
    int ml, mr, mt, mb;            /* margins: left, right, top, bottom */
    double pw, ph;                 /* the plot area */
} axes;

static const char *COL[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"};

/* The command line into o (pos holds its positional arguments; -o is --out). cli_parse's
 * status: 0, 1 (--help) or 2. */
static int parse_opts(plot_opts *o, int argc, char **argv, char **pos) {
    *o = (plot_opts){.out = "curves.svg", .xaxis = "steps", .W = 960, .H = 560};
    cli_opt opts[] = {
        {"out", 's', &o->out, "SVG file to write (curves.svg); -o works too"},
        {"smooth", 'f', &o->smooth, "exponential smoothing of the train loss, 0..0.999 (0 = raw)"},
        {"x", 's', &o->xaxis, "x axis: steps | tokens (steps)"},
        {"title", 's', &o->title, "title (the run names)"},
        {"ymax", 'f', &o->ymax, "upper end of the loss axis (auto)"},
        {"width", 'i', &o->W, "width in pixels (960)"},
        {"height", 'i', &o->H, "height in pixels (560)"},
        {0},
    };
    char **av = malloc(sizeof(char *) * (argc + 1));
    for (int i = 0; i < argc; i++) av[i] = !strcmp(argv[i], "-o") ? "--out" : argv[i];
    av[argc] = NULL;
    int rc = cli_parse(argc, av, "plot", "[NAME=]RUN_DIR_OR_LOG... [-o curves.svg] [options]", opts, pos, 64, &o->n_runs, NULL, NULL);
    free(av);
    if (rc) return rc;
    o->args = pos;
    if (o->n_runs < 1) { fprintf(stderr, "skiplm plot: give at least one run directory or log.jsonl\n"); return 2; }
    if (!(o->smooth >= 0 && o->smooth < 1)) { fprintf(stderr, "skiplm plot: --smooth must be in [0, 1)\n"); return 2; }
    if (strcmp(o->xaxis, "steps") && strcmp(o->xaxis, "tokens")) { fprintf(stderr, "skiplm plot: --x must be steps or tokens\n"); return 2; }
    if (o->W < 300 || o->H < 200 || o->W > 10000 || o->H > 10000) { fprintf(stderr, "skiplm plot: --width/--height out of range\n"); return 2; }
    o->use_tokens = !strcmp(o->xaxis, "tokens");
    return 0;
}

static void free_runs(run *runs, int n) {
    for (int i = 0; i < n; i++) { free(runs[i].x); free(runs[i].y); free(runs[i].vx); free(runs[i].vy); }
    free(runs);
}

/* Every run's log, smoothed (EMA with bias correction, like TensorBoard) with --smooth.
 * NULL on error (said). */
static run *load_runs(const plot_opts *o) {
    run *runs = calloc(o->n_runs, sizeof *runs);
    for (int i = 0; i < o->n_runs; i++)
        if (load_run(&runs[i], o->args[i], o->use_tokens)) {
            cli_fail("plot");
            free_runs(runs, i + 1);
            return NULL;
        }
    for (int i = 0; i < o->n_runs && o->smooth > 0; i++) {
        double ema = 0, w = 0;
        for (int k = 0; k < runs[i].n; k++) {
            ema = o->smooth * ema + (1 - o->smooth) * runs[i].y[k];
            w = o->smooth * w + (1 - o->smooth);
            runs[i].y[k] = ema / w;
        }
    }
    return runs;
}

/* The range of every curve (up to --ymax when given), rounded out to nice ticks. */
static axes make_axes(const run *runs, const plot_opts *o) {
    axes a = {.x0 = INFINITY, .x1 = -INFINITY, .y0 = INFINITY, .y1 = -INFINITY, .ml = 70, .mr = 200, .mt = 44, .mb = 56};
    for (int i = 0; i < o->n_runs; i++) {
        for (int k = 0; k < runs[i].n; k++) {
            a.x0 = fmin(a.x0, runs[i].x[k]); a.x1 = fmax(a.x1, runs[i].x[k]);
            a.y0 = fmin(a.y0, runs[i].y[k]); a.y1 = fmax(a.y1, runs[i].y[k]);
        }
        for (int k = 0; k < runs[i].nv; k++) {
            a.x0 = fmin(a.x0, runs[i].vx[k]); a.x1 = fmax(a.x1, runs[i].vx[k]);
            a.y0 = fmin(a.y0, runs[i].vy[k]); a.y1 = fmax(a.y1, runs[i].vy[k]);
        }
    }
    if (o->ymax > 0 && o->ymax > a.y0) a.y1 = o->ymax;
    if (a.x1 <= a.x0) a.x1 = a.x0 + 1;
    if (a.y1 <= a.y0) { a.y0 -= 0.5; a.y1 += 0.5; }
    a.xs = nice_step(a.x1 - a.x0, 8); a.ys = nice_step(a.y1 - a.y0, 6);
    a.x0 = floor(a.x0 / a.xs) * a.xs; a.x1 = ceil(a.x1 / a.xs) * a.xs;
    a.y0 = floor(a.y0 / a.ys) * a.ys; a.y1 = ceil(a.y1 / a.ys) * a.ys;
    a.pw = o->W - a.ml - a.mr; a.ph = o->H - a.mt - a.mb;
    return a;
}

/* Data coordinates to pixels (y clipped at the top of the axis). */
static double px(const axes *a, double v) { return a->ml + (v - a->x0) / (a->x1 - a->x0) * a->pw; }
static double py(const axes *a, double v) { return a->mt + (1 - (fmin(v, a->y1) - a->y0) / (a->y1 - a->y0)) * a->ph; }

/* The SVG's opening, its background and the title (the run names by default). */
static void svg_head(FILE *f, const run *runs, const plot_opts *o, const axes *a) {
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n", o->W, o->H, o->W, o->H);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", o->W, o->H);
    fprintf(f, "<text x=\"%d\" y=\"26\" font-size=\"15\" font-weight=\"bold\">", a->ml);
    if (o->title) xml_text(f, o->title);
    else {
        fputs("loss: ", f);
        for (int i = 0; i < o->n_runs; i++) { if (i) fputs(" vs ", f); xml_text(f, runs[i].name); }
    }
    fputs("</text>\n", f);
}

/* Grid lines, ticks and their labels, the frame and the axis names. */
static void svg_axes(FILE *f, const axes *a, const plot_opts *o) {
    const int ml = a->ml, mt = a->mt;
    const double pw = a->pw, ph = a->ph;
    char lab[64];
    for (double v = a->x0; v <= a->x1 + a->xs * 1e-9; v += a->xs) {
        double x = px(a, v);
        fmt_num(v, a->xs, lab, sizeof lab);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>\n", x, mt, x, mt + ph);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", x, mt + ph, x, mt + ph + 5);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", x, mt + ph + 19, lab);
    }
    for (double v = a->y0; v <= a->y1 + a->ys * 1e-9; v += a->ys) {
        double y = py(a, v);
        fmt_num(v, a->ys, lab, sizeof lab);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>\n", ml, y, ml + pw, y);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"black\"/>\n", ml - 5, y, ml, y);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", ml - 8, y + 4, lab);
    }
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"black\"/>\n", ml, mt, pw, ph);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", ml + pw / 2, o->H - 12, o->use_tokens ? "tokens" : "step");
    fprintf(f, "<text transform=\"translate(18 %.1f) rotate(-90)\" text-anchor=\"middle\">loss</text>\n", mt + ph / 2);
}

/* The curves, clipped to the plot area: train loss thin (every stride-th point of more than
 * 3000, and the last), validation loss dashed with dots. */
static void svg_curves(FILE *f, const run *runs, int n_runs, const axes *a) {
    fprintf(f, "<clipPath id=\"area\"><rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%.1f\"/></clipPath>\n<g clip-path=\"url(#area)\">\n",
            a->ml, a->mt, a->pw, a->ph);
    for (int i = 0; i < n_runs; i++) {
        const run *r = &runs[i];
        const char *c = COL[i % 8];
        int stride = r->n > 3000 ? r->n / 3000 : 1;
        if (r->n) {
            fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.2\" stroke-opacity=\"%s\" points=\"", c, r->nv ? "0.55" : "0.9");
            for (int k = 0; k < r->n; k += stride) fprintf(f, "%.1f,%.1f ", px(a, r->x[k]), py(a, r->y[k]));
            fprintf(f, "%.1f,%.1f\"/>\n", px(a, r->x[r->n - 1]), py(a, r->y[r->n - 1]));
        }
        if (r->nv) {
            fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2.2\" stroke-dasharray=\"7 4\" points=\"", c);
            for (int k = 0; k < r->nv; k++) fprintf(f, "%.1f,%.1f ", px(a, r->vx[k]), py(a, r->vy[k]));
            fputs("\"/>\n", f);
            for (int k = 0; k < r->nv; k++)
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", px(a, r->vx[k]), py(a, r->vy[k]), c);
        }
    }
    fputs("</g>\n", f);
}

/* The legend right of the plot: each run's name and its last train and val losses. */
static void svg_legend(FILE *f, const run *runs, const plot_opts *o, const axes *a) {
    int lx = a->ml + (int)a->pw + 16, ly = a->mt + 8;
    for (int i = 0; i < o->n_runs; i++) {
        const run *r = &runs[i];
        const char *c = COL[i % 8];
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-weight=\"bold\">", lx, ly + 4);
        xml_text(f, r->name);
        fputs("</text>\n", f);
        ly += 18;
        if (r->n) {
            fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"/>", lx, ly, lx + 26, ly, c);
            fprintf(f, "<text x=\"%d\" y=\"%d\">train%s %.4f</text>\n", lx + 32, ly + 4, o->smooth > 0 ? " (smoothed)" : "", r->y[r->n - 1]);
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
}

/* The whole SVG, written atomically to o->out. 0, or an error code. */
static int write_svg(const run *runs, const plot_opts *o) {
    const axes a = make_axes(runs, o);
    char *buf = NULL; size_t blen = 0;
    FILE *f = open_memstream(&buf, &blen);
    svg_head(f, runs, o, &a);
    svg_axes(f, &a, o);
    svg_curves(f, runs, o->n_runs, &a);
    svg_legend(f, runs, o, &a);
    fputs("</svg>\n", f);
    fclose(f);
    int rc = sk_write_atomic(o->out, buf, blen);
    free(buf);
    return rc;
}

int cmd_plot(int argc, char **argv) {
    plot_opts o;
    char *pos[64];
    int rc = parse_opts(&o, argc, argv, pos);
    if (rc) return rc == 1 ? 0 : rc;
    run *runs = load_runs(&o);
    if (!runs) return 1;
    rc = write_svg(runs, &o);
    free_runs(runs, o.n_runs);
    if (rc) return cli_fail("plot");
    fprintf(stderr, "skiplm plot: wrote %s (%d run%s)\n", o.out, o.n_runs, o.n_runs > 1 ? "s" : "");
    return 0;
}
