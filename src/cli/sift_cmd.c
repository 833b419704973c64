/*
 * sift_cmd.c — `flynn sift` (SIFT keypoints and descriptors of images, as OpenCV's cv::SIFT computes them,
 * to .npz files, one archive, JSON or a summary) and `flynn match` (two images' features matched with Lowe's
 * ratio test, a RANSAC homography or fundamental matrix, and an SVG of the matches) (sift_cmd.h).
 *
 * `flynn sift` streams: each image is read, its features computed, written and freed before the next, so a
 * folder of any size needs the memory of one image (the --out archive is written entry by entry through
 * io.h's fl_npz_writer). Per image the arrays are "keypoints" float32 (n, 5) = x, y, size, angle,
 * response; "octave" int32 (n,) as OpenCV packs it; "descriptors" (n, 128), float32 or (--uint8) uint8.
 * In one --out archive they are keyed "<file name>/keypoints" etc. when there are several images or a
 * folder, else plainly "keypoints" etc.
 *
 * The SVG of `flynn match` shows the two images side by side, embedded whole as data: URIs (the files'
 * own PNG or JPEG bytes, base64), each inlier match a green line between circles of its keypoints' sizes,
 * the outliers (--outliers) faint red; its elements carry classes (image-a, image-b, inlier, outlier,
 * keypoint) for tests. Pixel centres are at integers in flynn's keypoints and at +0.5 in the SVG.
 */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* open_memstream, clock_gettime, mkdir */
#endif
#include "sift_cmd.h"

#include "devtools.h"
#include "svg.h"
#include "flynn/flynn.h"
#include "core/error.h"
#include "io/io.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* ------------------------------------------------------------ options */

static int bad_usage(const char *cmd, const char *msg, const char *arg) {
    fprintf(stderr, "flynn %s: %s%s%s\n(see `flynn %s --help`)\n", cmd, msg, arg ? " " : "", arg ? arg : "", cmd);
    return 2;
}

/* Whether argv[*i] is the option `name` with a value ("--name V" or "--name=V"): 1 with *val set (*i moved
 * past it), 0 when it is another argument, -1 (reported) when the value is missing. */
static int opt_value(const char *cmd, int argc, char **argv, int *i, const char *name, const char **val) {
    const char *a = argv[*i];
    const size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return 0;
    if (a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (a[n] != 0) return 0;
    if (*i + 1 >= argc) {
        bad_usage(cmd, "missing value for", name);
        return -1;
    }
    *val = argv[++*i];
    return 1;
}

static int parse_int(const char *cmd, const char *opt, const char *v, int lo, int *out) {
    char *end;
    errno = 0;
    const long x = strtol(v, &end, 10);
    if (end == v || *end || errno || x < lo || x > 1 << 30) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s wants a whole number >= %d, got", opt, lo);
        return bad_usage(cmd, msg, v);
    }
    *out = (int)x;
    return 0;
}

static int parse_positive(const char *cmd, const char *opt, const char *v, float *out) {
    char *end;
    errno = 0;
    const double x = strtod(v, &end);
    if (end == v || *end || errno || !(x > 0) || !isfinite(x) || x > 1e30) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s wants a number > 0, got", opt);
        return bad_usage(cmd, msg, v);
    }
    *out = (float)x;
    return 0;
}

static int parse_device(const char *cmd, const char *v, fl_device_kind *out) {
    if (strcmp(v, "auto") == 0) *out = FL_DEVICE_AUTO;
    else if (strcmp(v, "cpu") == 0) *out = FL_DEVICE_CPU;
    else if (strcmp(v, "gpu") == 0) *out = FL_DEVICE_GPU;
    else if (strcmp(v, "opencl") == 0) *out = FL_DEVICE_OPENCL;
    else return bad_usage(cmd, "--device wants auto, cpu, gpu or opencl, got", v);
    return 0;
}

/* The SIFT options both commands take: 1 when argv[*i] was one (parsed into a), 0 when not, 2 on a usage
 * error (reported). */
static int sift_option(const char *cmd, int argc, char **argv, int *i, fl_sift_args *a) {
    const char *v = NULL;
    int r;
    if ((r = opt_value(cmd, argc, argv, i, "--nfeatures", &v)) != 0)
        return r < 0 ? 2 : parse_int(cmd, "--nfeatures", v, 0, &a->nfeatures) ? 2 : 1;
    if ((r = opt_value(cmd, argc, argv, i, "--layers", &v)) != 0)
        return r < 0 ? 2 : parse_int(cmd, "--layers", v, 1, &a->n_octave_layers) ? 2 : 1;
    if ((r = opt_value(cmd, argc, argv, i, "--contrast-threshold", &v)) != 0)
        return r < 0 ? 2 : parse_positive(cmd, "--contrast-threshold", v, &a->contrast_threshold) ? 2 : 1;
    if ((r = opt_value(cmd, argc, argv, i, "--edge-threshold", &v)) != 0)
        return r < 0 ? 2 : parse_positive(cmd, "--edge-threshold", v, &a->edge_threshold) ? 2 : 1;
    if ((r = opt_value(cmd, argc, argv, i, "--sigma", &v)) != 0)
        return r < 0 ? 2 : parse_positive(cmd, "--sigma", v, &a->sigma) ? 2 : 1;
    if ((r = opt_value(cmd, argc, argv, i, "--device", &v)) != 0)
        return r < 0 ? 2 : parse_device(cmd, v, &a->device) ? 2 : 1;
    if (strcmp(argv[*i], "--no-upscale") == 0) {
        a->no_upscale = true;
        return 1;
    }
    return 0;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

/* ------------------------------------------------------------ images */

static bool image_name(const char *name) {
    const char *dot = strrchr(name, '.');
    if (!dot || name[0] == '.') return false;
    char ext[8];
    size_t n = strlen(dot + 1);
    if (n == 0 || n >= sizeof ext) return false;
    for (size_t k = 0; k <= n; k++) ext[k] = (char)(dot[1 + k] >= 'A' && dot[1 + k] <= 'Z' ? dot[1 + k] + 32 : dot[1 + k]);
    return strcmp(ext, "png") == 0 || strcmp(ext, "jpg") == 0 || strcmp(ext, "jpeg") == 0;
}

typedef struct image_list {
    int n, cap;
    char **path;
    bool any_dir;
} image_list;

static void list_free(image_list *l) {
    for (int i = 0; i < l->n; i++) free(l->path[i]);
    free(l->path);
    memset(l, 0, sizeof *l);
}

static int list_add(image_list *l, const char *dir, const char *name) {
    if (l->n >= l->cap) {
        const int nc = l->cap ? 2 * l->cap : 16;
        char **p = realloc(l->path, (size_t)nc * sizeof *p);
        if (!p) return 1;
        l->path = p;
        l->cap = nc;
    }
    const size_t dl = dir ? strlen(dir) : 0, nl = strlen(name);
    char *s = malloc(dl + nl + 2);
    if (!s) return 1;
    if (dir) {
        memcpy(s, dir, dl);
        s[dl] = '/';
        memcpy(s + dl + (dl && dir[dl - 1] == '/' ? 0 : 1), name, nl + 1);
    } else {
        memcpy(s, name, nl + 1);
    }
    l->path[l->n++] = s;
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The images of the arguments: a file as it is, a folder's .png/.jpg/.jpeg files (not hidden ones, not
 * subfolders) in sorted order. 1 (reported) when an argument is missing or a folder holds no image. */
static int list_images(const char *cmd, char **args, int nargs, image_list *l) {
    for (int i = 0; i < nargs; i++) {
        struct stat st;
        if (stat(args[i], &st) != 0) {
            fprintf(stderr, "flynn %s: cannot read %s: %s\n", cmd, args[i], strerror(errno));
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (list_add(l, NULL, args[i])) goto nomem;
            continue;
        }
        l->any_dir = true;
        DIR *d = opendir(args[i]);
        if (!d) {
            fprintf(stderr, "flynn %s: cannot list the folder %s: %s\n", cmd, args[i], strerror(errno));
            return 1;
        }
        const int first = l->n;
        struct dirent *de;
        while ((de = readdir(d))) {
            if (!image_name(de->d_name)) continue;
            if (list_add(l, args[i], de->d_name)) {
                closedir(d);
                goto nomem;
            }
            struct stat es;
            if (stat(l->path[l->n - 1], &es) != 0 || !S_ISREG(es.st_mode)) free(l->path[--l->n]);
        }
        closedir(d);
        if (l->n == first) {
            fprintf(stderr, "flynn %s: the folder %s holds no .png, .jpg or .jpeg image\n", cmd, args[i]);
            return 1;
        }
        qsort(l->path + first, (size_t)(l->n - first), sizeof *l->path, cmp_str);
    }
    return 0;
nomem:
    fprintf(stderr, "flynn %s: out of memory listing the images\n", cmd);
    return 1;
}

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* One image's features. */
typedef struct features {
    int width, height;
    fl_keypoints kp;
    fl_tensor *desc;
    double ms; /* SIFT's time */
    char why[256];
} features;

static void features_free(features *f) {
    fl_keypoints_free(&f->kp);
    fl_tensor_free(f->desc);
    f->desc = NULL;
}

/* Reads path as gray and computes its features; 1 (reported) on failure. */
static int compute(const char *cmd, const char *path, fl_sift_args a, features *f) {
    memset(f, 0, sizeof *f);
    fl_tensor *img = fl_load_image(path, FL_COLOR_GRAYSCALE, 0, 0);
    if (!img) {
        fprintf(stderr, "flynn %s: %s\n", cmd, fl_last_error());
        return 1;
    }
    f->height = (int)fl_tensor_dim(img, 0);
    f->width = (int)fl_tensor_dim(img, 1);
    a.why = f->why;
    a.why_len = sizeof f->why;
    const double t0 = now_ms();
    const fl_status s = fl_sift_detect_and_compute_(img, &f->kp, &f->desc, a);
    f->ms = now_ms() - t0;
    fl_tensor_free(img);
    if (s != FL_OK) {
        fprintf(stderr, "flynn %s: %s: %s\n", cmd, path, fl_last_error());
        features_free(f);
        return 1;
    }
    return 0;
}

/* The keypoints as the .npz holds them: (n, 5) float32 and (n,) int32. */
static fl_status keypoint_arrays(const fl_keypoints *kp, fl_tensor **xy, fl_tensor **oct) {
    *xy = fl_tensor_zeros(FL_FLOAT32, kp->n, 5);
    *oct = fl_tensor_zeros(FL_INT32, kp->n);
    if (!*xy || !*oct) {
        fl_tensor_free(*xy);
        fl_tensor_free(*oct);
        *xy = *oct = NULL;
        return fl_last_status();
    }
    float *p = fl_tensor_data(*xy);
    int32_t *o = fl_tensor_data(*oct);
    for (int64_t i = 0; i < kp->n; i++) {
        const fl_keypoint k = kp->data[i];
        p[i * 5] = k.x, p[i * 5 + 1] = k.y, p[i * 5 + 2] = k.size, p[i * 5 + 3] = k.angle, p[i * 5 + 4] = k.response;
        o[i] = k.octave;
    }
    return FL_OK;
}

/* The three arrays into w, keyed prefix + "keypoints" etc. */
static fl_status add_features(fl_npz_writer *w, const char *prefix, const features *f) {
    fl_tensor *xy, *oct;
    FL_TRY(keypoint_arrays(&f->kp, &xy, &oct));
    const char *names[3] = {"keypoints", "octave", "descriptors"};
    const fl_tensor *arrays[3] = {xy, oct, f->desc};
    fl_status s = FL_OK;
    for (int k = 0; k < 3 && s == FL_OK; k++) {
        char key[4200];
        snprintf(key, sizeof key, "%s%s", prefix, names[k]);
        s = fl_npz_writer_add(w, key, arrays[k]);
    }
    fl_tensor_free(xy);
    fl_tensor_free(oct);
    return s;
}

static fl_status save_features(const char *path, const features *f) {
    fl_npz_writer *w = fl_npz_writer_open(path);
    if (!w) return fl_last_status();
    fl_status s = add_features(w, "", f);
    if (s == FL_OK) return fl_npz_writer_commit(w);
    fl_npz_writer_abort(w);
    return s;
}

/* ------------------------------------------------------------ JSON */

static void json_num(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, "%.9g", v);
    else fputs("null", f);
}

static void json_features(FILE *f, const char *path, const features *ft) {
    fputs("{\"path\":", f);
    flynn_json_str(f, path);
    fprintf(f, ",\"width\":%d,\"height\":%d,\"device\":", ft->width, ft->height);
    flynn_json_str(f, ft->why);
    fputs(",\"keypoints\":[", f);
    for (int64_t i = 0; i < ft->kp.n; i++) {
        const fl_keypoint k = ft->kp.data[i];
        fputs(i ? ",[" : "[", f);
        json_num(f, k.x), fputc(',', f), json_num(f, k.y), fputc(',', f), json_num(f, k.size), fputc(',', f);
        json_num(f, k.angle), fputc(',', f), json_num(f, k.response);
        fprintf(f, ",%d]", k.octave);
    }
    fputs("],\"descriptors\":[", f);
    const int64_t n = fl_tensor_dim(ft->desc, 0), d = fl_tensor_dim(ft->desc, 1);
    const bool u8 = fl_tensor_dtype(ft->desc) == FL_UINT8;
    const uint8_t *pu = fl_tensor_cdata(ft->desc);
    const float *pf = fl_tensor_cdata(ft->desc);
    for (int64_t i = 0; i < n; i++) {
        fputs(i ? ",[" : "[", f);
        for (int64_t k = 0; k < d; k++) {
            if (k) fputc(',', f);
            if (u8) fprintf(f, "%u", pu[i * d + k]);
            else json_num(f, pf[i * d + k]);
        }
        fputc(']', f);
    }
    fputs("]}", f);
}

/* ------------------------------------------------------------ flynn sift */

static void usage_sift(FILE *f) {
    fprintf(f,
            "usage: flynn sift IMAGE|DIR... [--out F.npz | --out-dir D | --json] [options]\n\n"
            "SIFT keypoints and descriptors of each image (PNG or JPEG, read as gray), as OpenCV's\n"
            "cv::SIFT computes them. A folder stands for every .png/.jpg/.jpeg file in it (sorted).\n"
            "The images are streamed: one in memory at a time.\n\n"
            "  (no output option)       one line per image: keypoints, size, time\n"
            "  --out F.npz              one archive: keypoints float32 (n, 5) = x, y, size, angle,\n"
            "                           response; octave int32 (n,); descriptors (n, 128); keyed\n"
            "                           \"<file name>/keypoints\" etc. for several images or a folder\n"
            "  --out-dir D              one D/<image name without extension>.npz per image\n"
            "  --json                   every keypoint and descriptor as JSON on stdout:\n"
            "                           {\"images\":[{\"path\",\"width\",\"height\",\"keypoints\":[[x,y,\n"
            "                           size,angle,response,octave],...],\"descriptors\":[[...],...]}]}\n"
            "  --nfeatures N            keep the N best keypoints by response (default 0: all)\n"
            "  --contrast-threshold X   OpenCV's contrastThreshold (default 0.04)\n"
            "  --edge-threshold X       OpenCV's edgeThreshold (default 10)\n"
            "  --sigma X                the first octave's blur (default 1.6)\n"
            "  --layers N               layers per octave, nOctaveLayers (default 3)\n"
            "  --no-upscale             do not double the image first (OpenCV does)\n"
            "  --uint8                  uint8 descriptors (default float32, whole numbers 0-255)\n"
            "  --device auto|cpu|gpu|opencl   where SIFT runs (default auto)\n\n"
            "Exit status: 0 done, 1 an image or folder is unreadable or an output cannot be written\n"
            "(the message names it; outputs finished before it stay), 2 bad usage.\n");
}

enum { OUT_SUMMARY = 0, OUT_NPZ, OUT_DIR, OUT_JSON };

/* Where image i's features go under --out-dir: D/<name without its extension>.npz. */
static char *dir_target(const char *dir, const char *path) {
    const char *name = base_name(path), *dot = strrchr(name, '.');
    const size_t nl = dot && dot != name ? (size_t)(dot - name) : strlen(name), dl = strlen(dir);
    char *s = malloc(dl + nl + 6);
    if (s) snprintf(s, dl + nl + 6, "%s/%.*s.npz", dir, (int)nl, name);
    return s;
}

/* Two images that would write the same output (file or archive key): a usage error. */
static int check_collisions(const image_list *l, int mode, const char *dir) {
    char **keys = calloc((size_t)(l->n ? l->n : 1), sizeof *keys);
    if (!keys) return bad_usage("sift", "out of memory", NULL);
    int rc = 0;
    for (int i = 0; i < l->n && !rc; i++) {
        keys[i] = mode == OUT_DIR ? dir_target(dir, l->path[i]) : strdup(base_name(l->path[i]));
        if (!keys[i]) rc = bad_usage("sift", "out of memory", NULL);
    }
    if (!rc) {
        qsort(keys, (size_t)l->n, sizeof *keys, cmp_str);
        for (int i = 1; i < l->n; i++)
            if (strcmp(keys[i - 1], keys[i]) == 0) {
                char msg[600];
                snprintf(msg, sizeof msg, "two images would be written as %.500s%s", keys[i],
                         mode == OUT_DIR ? "" : " in the archive (images of the same name in two folders)");
                rc = bad_usage("sift", msg, mode == OUT_DIR ? "(images of the same name in two folders?)" : NULL);
                break;
            }
    }
    for (int i = 0; i < l->n; i++) free(keys[i]);
    free(keys);
    return rc;
}

int flynn_cmd_sift(int argc, char **argv) {
    const char *cmd = "sift";
    fl_sift_args a = {._reserved = 0};
    const char *out = NULL, *out_dir = NULL;
    bool json = false;
    char **inputs = calloc((size_t)(argc ? argc : 1), sizeof *inputs);
    int ninputs = 0, rc = 0;
    if (!inputs) return bad_usage(cmd, "out of memory", NULL);
    for (int i = 0; i < argc && !rc; i++) {
        const char *arg = argv[i], *v = NULL;
        int r;
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            usage_sift(stdout);
            free(inputs);
            return 0;
        }
        if ((r = sift_option(cmd, argc, argv, &i, &a)) != 0) {
            if (r == 2) rc = 2;
            continue;
        }
        if ((r = opt_value(cmd, argc, argv, &i, "--out-dir", &v)) != 0) {
            if (r < 0) rc = 2;
            else out_dir = v;
            continue;
        }
        if ((r = opt_value(cmd, argc, argv, &i, "--out", &v)) != 0) {
            if (r < 0) rc = 2;
            else out = v;
            continue;
        }
        if (strcmp(arg, "--json") == 0) json = true;
        else if (strcmp(arg, "--uint8") == 0) a.descriptor_type = FL_UINT8;
        else if (arg[0] == '-' && arg[1]) rc = bad_usage(cmd, "unknown option", arg);
        else inputs[ninputs++] = argv[i];
    }
    if (rc) {
        free(inputs);
        return rc;
    }
    if ((out != NULL) + (out_dir != NULL) + json > 1) {
        free(inputs);
        return bad_usage(cmd, "--out, --out-dir and --json exclude each other", NULL);
    }
    if (ninputs == 0) {
        free(inputs);
        return bad_usage(cmd, "missing IMAGE or DIR (PNG or JPEG files, or folders of them)", NULL);
    }
    if ((out && !*out) || (out_dir && !*out_dir)) {
        free(inputs);
        return bad_usage(cmd, out ? "--out wants a file name" : "--out-dir wants a folder", NULL);
    }
    const int mode = out ? OUT_NPZ : out_dir ? OUT_DIR : json ? OUT_JSON : OUT_SUMMARY;
    image_list l = {0};
    if ((rc = list_images(cmd, inputs, ninputs, &l)) != 0) goto done;
    for (int i = 0; i < l.n && out; i++)
        if (strcmp(l.path[i], out) == 0) {
            rc = bad_usage(cmd, "the output would replace an input image:", out);
            goto done;
        }
    const bool keyed = l.n > 1 || l.any_dir;
    if ((mode == OUT_DIR || (mode == OUT_NPZ && keyed)) && (rc = check_collisions(&l, mode, out_dir)) != 0) goto done;
    if (mode == OUT_DIR) {
        struct stat st;
        if (stat(out_dir, &st) != 0 && mkdir(out_dir, 0777) != 0) {
            fprintf(stderr, "flynn sift: cannot make the folder %s (--out-dir): %s\n", out_dir, strerror(errno));
            rc = 1;
            goto done;
        }
        if (stat(out_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
            fprintf(stderr, "flynn sift: --out-dir %s is not a folder\n", out_dir);
            rc = 1;
            goto done;
        }
    }
    fl_npz_writer *w = NULL;
    if (mode == OUT_NPZ && !(w = fl_npz_writer_open(out))) {
        fprintf(stderr, "flynn sift: %s\n", fl_last_error());
        rc = 1;
        goto done;
    }
    if (mode == OUT_JSON) fputs("{\"images\":[", stdout);
    int64_t total = 0;
    for (int i = 0; i < l.n; i++) {
        features f;
        if ((rc = compute(cmd, l.path[i], a, &f)) != 0) break;
        if (i == 0 && mode != OUT_JSON && f.why[0]) printf("%s\n", f.why);
        total += f.kp.n;
        char *target = NULL;
        fl_status s = FL_OK;
        if (mode == OUT_NPZ) {
            char prefix[4096];
            snprintf(prefix, sizeof prefix, "%s/", keyed ? base_name(l.path[i]) : "");
            s = add_features(w, keyed ? prefix : "", &f);
        } else if (mode == OUT_DIR) {
            if (!(target = dir_target(out_dir, l.path[i]))) s = FL_ERR_NOMEM;
            else s = save_features(target, &f);
        } else if (mode == OUT_JSON) {
            if (i) fputc(',', stdout);
            fputc('\n', stdout);
            json_features(stdout, l.path[i], &f);
        }
        if (s != FL_OK) {
            fprintf(stderr, "flynn sift: %s: %s\n", l.path[i], s == FL_ERR_NOMEM && !target ? "out of memory" : fl_last_error());
            rc = 1;
        } else if (mode != OUT_JSON) {
            printf("%s: %lld keypoints, %dx%d, %.1f ms%s%s\n", l.path[i], (long long)f.kp.n, f.width, f.height, f.ms,
                   target ? " -> " : "", target ? target : "");
        }
        free(target);
        features_free(&f);
        if (rc) break;
    }
    if (mode == OUT_JSON && !rc) fputs("\n]}\n", stdout);
    if (w) {
        if (rc) fl_npz_writer_abort(w);
        else if (fl_npz_writer_commit(w) != FL_OK) {
            fprintf(stderr, "flynn sift: %s\n", fl_last_error());
            rc = 1;
        } else {
            printf("%d image%s, %lld keypoints written to %s\n", l.n, l.n == 1 ? "" : "s", (long long)total, out);
        }
    }
    if (fflush(stdout) != 0 && !rc) {
        fprintf(stderr, "flynn sift: writing the output: %s\n", strerror(errno));
        rc = 1;
    }
done:
    list_free(&l);
    free(inputs);
    return rc;
}

/* ------------------------------------------------------------ the SVG */

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        const size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        char *p = realloc(buf, cap *= 2);
        if (!p) free(buf);
        buf = p;
    }
    const bool bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static void base64(FILE *f, const unsigned char *p, size_t n) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < n; i += 3) {
        const uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        fputc(tab[v >> 18 & 63], f);
        fputc(tab[v >> 12 & 63], f);
        fputc(i + 1 < n ? tab[v >> 6 & 63] : '=', f);
        fputc(i + 2 < n ? tab[v & 63] : '=', f);
    }
}

/* <image> of the file's own bytes at x (0 at top), or a grey box where the file cannot be read again. */
static void svg_image(FILE *f, const char *cls, const char *path, double x, double y, int w, int h) {
    size_t n = 0;
    char *bytes = read_file(path, &n);
    const unsigned char *u = (const unsigned char *)bytes;
    const char *mime = bytes && n > 8 && memcmp(u, "\x89PNG", 4) == 0 ? "image/png"
                       : bytes && n > 3 && u[0] == 0xFF && u[1] == 0xD8 && u[2] == 0xFF ? "image/jpeg" : NULL;
    if (!mime) {
        fprintf(f, "<rect class=\"%s\" x=\"%.1f\" y=\"%.1f\" width=\"%d\" height=\"%d\" fill=\"#ccc\"/>\n", cls, x, y, w, h);
        free(bytes);
        return;
    }
    fprintf(f, "<image class=\"%s\" x=\"%.1f\" y=\"%.1f\" width=\"%d\" height=\"%d\" preserveAspectRatio=\"none\" "
               "href=\"data:%s;base64,", cls, x, y, w, h, mime);
    base64(f, u, n);
    fputs("\"/>\n", f);
    free(bytes);
}

typedef struct match_view {
    const char *path[2];
    const features *ft[2];
    const fl_matches *m;
    const bool *inlier; /* NULL: no model */
    const char *title;
    bool outliers;
} match_view;

static fl_status write_match_svg(const match_view *v, const char *out) {
    const double gap = 20, top = 50;
    const double wa = v->ft[0]->width, wb = v->ft[1]->width;
    const double W = wa + gap + wb, H = top + fmax(v->ft[0]->height, v->ft[1]->height) + 10;
    const double ox[2] = {0, wa + gap};
    char *mem = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&mem, &len);
    if (!f) return fl_error(FL_ERR_NOMEM, "%s: out of memory for the SVG", out);
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
               "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n",
            W, H, W, H);
    fputs("<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n", f);
    flynn_svg_text_c(f, "title", W / 2, 20, "middle", 14, "bold", "#222", v->title);
    for (int s = 0; s < 2; s++) {
        flynn_svg_text_c(f, "name", ox[s] + 2, top - 8, "start", 12, "normal", "#444", base_name(v->path[s]));
        svg_image(f, s ? "image-b" : "image-a", v->path[s], ox[s], top, v->ft[s]->width, v->ft[s]->height);
    }
    /* outliers first (under), then inliers */
    for (int pass = 0; pass < 2; pass++) {
        const bool in_pass = pass == 1;
        if (!in_pass && !v->outliers && v->inlier) continue;
        fprintf(f, "<g class=\"%s\" fill=\"none\">\n", in_pass ? "inliers" : "outliers");
        for (int64_t i = 0; i < v->m->n; i++) {
            const bool in = v->inlier ? v->inlier[i] : in_pass;
            if (in != in_pass) continue;
            const fl_keypoint ka = v->ft[0]->kp.data[v->m->data[i].query], kb = v->ft[1]->kp.data[v->m->data[i].train];
            const char *col = in ? "#1a9e1a" : "#d62728";
            const double op = in ? 0.9 : 0.35;
            const double xa = ox[0] + ka.x + 0.5, ya = top + ka.y + 0.5, xb = ox[1] + kb.x + 0.5, yb = top + kb.y + 0.5;
            fprintf(f, "<line class=\"%s\" data-match=\"%lld\" x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" "
                       "stroke=\"%s\" stroke-opacity=\"%.2f\" stroke-width=\"1\"/>\n",
                    in ? "inlier" : "outlier", (long long)i, xa, ya, xb, yb, col, op);
            fprintf(f, "<circle class=\"keypoint\" cx=\"%.2f\" cy=\"%.2f\" r=\"%.2f\" stroke=\"%s\" stroke-opacity=\"%.2f\"/>\n",
                    xa, ya, fmax(ka.size / 2, 1), col, op);
            fprintf(f, "<circle class=\"keypoint\" cx=\"%.2f\" cy=\"%.2f\" r=\"%.2f\" stroke=\"%s\" stroke-opacity=\"%.2f\"/>\n",
                    xb, yb, fmax(kb.size / 2, 1), col, op);
        }
        fputs("</g>\n", f);
    }
    fputs("</svg>\n", f);
    if (fclose(f) != 0 || !mem) {
        free(mem);
        return fl_error(FL_ERR_NOMEM, "%s: out of memory for the SVG", out);
    }
    const fl_status s = fl_atomic_save(out, mem, len);
    free(mem);
    return s;
}

/* ------------------------------------------------------------ flynn match */

static void usage_match(FILE *f) {
    fprintf(f,
            "usage: flynn match A B [options]\n\n"
            "Matches the SIFT features of two images (PNG or JPEG): each of A's descriptors to its\n"
            "nearest two in B (brute force, exact L2, as cv::BFMatcher), kept by Lowe's ratio test,\n"
            "then a geometric model fitted by RANSAC and refined on its inliers. Prints\n"
            "  A: n keypoints, B: m keypoints, k matches after the ratio test, i inliers (homography)\n"
            "and the model's 3 x 3 matrix.\n\n"
            "  --ratio R             Lowe's ratio (default 0.75; 1: no ratio test)\n"
            "  --cross-check         keep a match only when each is the other's nearest\n"
            "  --geometry homography|fundamental|none   the model (default homography:\n"
            "                        x_B ~ H x_A; fundamental: x_B^T F x_A = 0)\n"
            "  --threshold PX        an inlier's reprojection (homography, default 3) or Sampson\n"
            "                        (fundamental, default 1) distance in pixels\n"
            "  --seed S              RANSAC's samples (default 0; the same seed, the same model)\n"
            "  --svg OUT.svg         the two images side by side with the inlier matches in green\n"
            "  --outliers            in the SVG also the outlier matches, faint red\n"
            "  --json                the matches, the inliers and the matrix as JSON on stdout\n"
            "  --nfeatures N         SIFT: keep the N best keypoints per image (default 0: all)\n"
            "  --contrast-threshold X, --edge-threshold X, --sigma X, --layers N, --no-upscale\n"
            "                        SIFT's parameters, as `flynn sift`\n"
            "  --device auto|cpu|gpu|opencl   where SIFT runs (default auto)\n\n"
            "Exit status: 0 done, 1 an image is unreadable, the SVG cannot be written or no model\n"
            "was found (too few matches: the message says how many), 2 bad usage.\n");
}

static void print_matrix(FILE *f, const double M[9], bool json) {
    if (json) {
        fputc('[', f);
        for (int r = 0; r < 3; r++) {
            fputs(r ? ",[" : "[", f);
            for (int c = 0; c < 3; c++) {
                if (c) fputc(',', f);
                if (isfinite(M[r * 3 + c])) fprintf(f, "%.17g", M[r * 3 + c]);
                else fputs("null", f);
            }
            fputc(']', f);
        }
        fputc(']', f);
        return;
    }
    for (int r = 0; r < 3; r++) fprintf(f, "  [%14.8g %14.8g %14.8g]\n", M[r * 3], M[r * 3 + 1], M[r * 3 + 2]);
}

/* ", 452 inliers (homography)", or ", no homography" where none was found. */
static void model_suffix(char *buf, size_t n, const char *geom, int64_t n_in, bool none) {
    if (none) snprintf(buf, n, ", no %s", geom);
    else snprintf(buf, n, ", %lld inlier%s (%s)", (long long)n_in, n_in == 1 ? "" : "s", geom);
}

static void json_side(FILE *f, const char *path, const features *ft) {
    fputs("{\"path\":", f);
    flynn_json_str(f, path);
    fprintf(f, ",\"width\":%d,\"height\":%d,\"keypoints\":%lld,\"sift_ms\":%.1f}", ft->width, ft->height,
            (long long)ft->kp.n, ft->ms);
}

int flynn_cmd_match(int argc, char **argv) {
    const char *cmd = "match";
    fl_sift_args sa = {._reserved = 0};
    fl_match_args ma = {._reserved = 0};
    const char *path[2] = {NULL, NULL}, *svg = NULL, *geom = "homography";
    float threshold = 0;
    int seed = 0;
    bool json = false, outliers = false;
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i], *v = NULL;
        int r;
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            usage_match(stdout);
            return 0;
        }
        if ((r = sift_option(cmd, argc, argv, &i, &sa)) != 0) {
            if (r == 2) return 2;
            continue;
        }
        if ((r = opt_value(cmd, argc, argv, &i, "--ratio", &v)) != 0) {
            if (r < 0 || parse_positive(cmd, "--ratio", v, &ma.ratio)) return 2;
            continue;
        }
        if ((r = opt_value(cmd, argc, argv, &i, "--threshold", &v)) != 0) {
            if (r < 0 || parse_positive(cmd, "--threshold", v, &threshold)) return 2;
            continue;
        }
        if ((r = opt_value(cmd, argc, argv, &i, "--seed", &v)) != 0) {
            if (r < 0 || parse_int(cmd, "--seed", v, 0, &seed)) return 2;
            continue;
        }
        if ((r = opt_value(cmd, argc, argv, &i, "--svg", &v)) != 0) {
            if (r < 0) return 2;
            if (!*v) return bad_usage(cmd, "--svg wants a file name", NULL);
            svg = v;
            continue;
        }
        if ((r = opt_value(cmd, argc, argv, &i, "--geometry", &v)) != 0) {
            if (r < 0) return 2;
            if (strcmp(v, "homography") != 0 && strcmp(v, "fundamental") != 0 && strcmp(v, "none") != 0)
                return bad_usage(cmd, "--geometry wants homography, fundamental or none, got", v);
            geom = v;
            continue;
        }
        if (strcmp(arg, "--cross-check") == 0) ma.cross_check = true;
        else if (strcmp(arg, "--json") == 0) json = true;
        else if (strcmp(arg, "--outliers") == 0) outliers = true;
        else if (arg[0] == '-' && arg[1]) return bad_usage(cmd, "unknown option", arg);
        else if (!path[0]) path[0] = arg;
        else if (!path[1]) path[1] = arg;
        else return bad_usage(cmd, "two images, A and B; also got", arg);
    }
    if (!path[1]) return bad_usage(cmd, path[0] ? "missing B, the second image" : "missing A and B, the two images", NULL);
    if (svg && (strcmp(svg, path[0]) == 0 || strcmp(svg, path[1]) == 0))
        return bad_usage(cmd, "the SVG would replace an input image:", svg);
    if (outliers && !svg) return bad_usage(cmd, "--outliers draws into the SVG: give --svg OUT.svg too", NULL);
    const bool model = strcmp(geom, "none") != 0;
    if (threshold > 0 && !model) return bad_usage(cmd, "--threshold needs a model (--geometry homography|fundamental)", NULL);

    features ft[2];
    memset(ft, 0, sizeof ft);
    fl_matches m = {0};
    bool *inlier = NULL;
    int rc = 0;
    for (int s = 0; s < 2 && !rc; s++) rc = compute(cmd, path[s], sa, &ft[s]);
    if (rc) goto done;
    if (fl_match_descriptors_(ft[0].desc, ft[1].desc, &m, ma) != FL_OK) {
        fprintf(stderr, "flynn match: %s\n", fl_last_error());
        rc = 1;
        goto done;
    }
    double M[9] = {0};
    int64_t n_in = 0;
    char why_not[1024] = "";
    const fl_geometry g = strcmp(geom, "fundamental") == 0 ? FL_FUNDAMENTAL : FL_HOMOGRAPHY;
    if (model) {
        if (!(inlier = calloc((size_t)(m.n ? m.n : 1), sizeof *inlier))) {
            fprintf(stderr, "flynn match: out of memory\n");
            rc = 1;
            goto done;
        }
        if (fl_find_geometry(&ft[0].kp, &ft[1].kp, &m, M, &n_in, .model = g, .threshold = threshold,
                             .seed = (uint64_t)seed, .inlier = inlier) != FL_OK) {
            snprintf(why_not, sizeof why_not, "%s", fl_last_error());
            memset(inlier, 0, (size_t)(m.n ? m.n : 1) * sizeof *inlier);
            n_in = 0;
        }
    }
    char line[2048];
    const char *filter = ma.ratio >= 1 ? (ma.cross_check ? " (cross-checked, no ratio test)" : " (no ratio test)")
                         : ma.cross_check ? " after the ratio test and the cross check" : " after the ratio test";
    int at = snprintf(line, sizeof line, "%s: %lld keypoints, %s: %lld keypoints, %lld match%s%s", path[0],
                      (long long)ft[0].kp.n, path[1], (long long)ft[1].kp.n, (long long)m.n, m.n == 1 ? "" : "es", filter);
    if (model && at > 0 && (size_t)at < sizeof line) model_suffix(line + at, sizeof line - (size_t)at, geom, n_in, why_not[0]);
    if (json) {
        fputs("{\"a\":", stdout);
        json_side(stdout, path[0], &ft[0]);
        fputs(",\"b\":", stdout);
        json_side(stdout, path[1], &ft[1]);
        printf(",\"ratio\":%g,\"cross_check\":%s,\"geometry\":\"%s\"", ma.ratio > 0 ? (double)ma.ratio : 0.75,
               ma.cross_check ? "true" : "false", geom);
        if (model) {
            printf(",\"threshold\":%g,\"inliers\":%lld,\"matrix\":", threshold > 0 ? (double)threshold : g == FL_HOMOGRAPHY ? 3.0 : 1.0,
                   (long long)n_in);
            if (why_not[0]) {
                fputs("null,\"error\":", stdout);
                flynn_json_str(stdout, why_not);
            } else {
                print_matrix(stdout, M, true);
            }
        }
        fputs(",\"matches\":[", stdout);
        for (int64_t i = 0; i < m.n; i++) {
            const fl_keypoint ka = ft[0].kp.data[m.data[i].query], kb = ft[1].kp.data[m.data[i].train];
            printf("%s\n{\"query\":%d,\"train\":%d,\"distance\":%.9g,\"a\":[%.9g,%.9g],\"b\":[%.9g,%.9g]", i ? "," : "",
                   m.data[i].query, m.data[i].train, (double)m.data[i].distance, (double)ka.x, (double)ka.y,
                   (double)kb.x, (double)kb.y);
            if (model) printf(",\"inlier\":%s", inlier[i] ? "true" : "false");
            fputc('}', stdout);
        }
        fputs("\n]}\n", stdout);
    } else {
        if (ft[0].why[0]) printf("%s\n", ft[0].why);
        printf("%s\n", line);
        if (model && !why_not[0]) {
            printf("%s:\n", g == FL_HOMOGRAPHY ? "homography H (x_B ~ H x_A)" : "fundamental matrix F (x_B^T F x_A = 0)");
            print_matrix(stdout, M, false);
        }
    }
    if (svg) {
        char title[2048]; /* the line with the images' file names */
        at = snprintf(title, sizeof title, "%s (%lld keypoints) and %s (%lld): %lld match%s%s", base_name(path[0]),
                      (long long)ft[0].kp.n, base_name(path[1]), (long long)ft[1].kp.n, (long long)m.n,
                      m.n == 1 ? "" : "es", filter);
        if (model && at > 0 && (size_t)at < sizeof title) model_suffix(title + at, sizeof title - (size_t)at, geom, n_in, why_not[0]);
        const match_view v = {.path = {path[0], path[1]}, .ft = {&ft[0], &ft[1]}, .m = &m,
                              .inlier = model ? inlier : NULL, .title = title, .outliers = outliers};
        if (write_match_svg(&v, svg) != FL_OK) {
            fprintf(stderr, "flynn match: %s\n", fl_last_error());
            rc = 1;
        } else if (!json) {
            printf("drawn to %s\n", svg);
        }
    }
    if (why_not[0]) {
        fprintf(stderr, "flynn match: %s\n", why_not);
        rc = 1;
    }
    if (fflush(stdout) != 0 && !rc) {
        fprintf(stderr, "flynn match: writing the output: %s\n", strerror(errno));
        rc = 1;
    }
done:
    for (int s = 0; s < 2; s++) features_free(&ft[s]);
    fl_matches_free(&m);
    free(inlier);
    return rc;
}
