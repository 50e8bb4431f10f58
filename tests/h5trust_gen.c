/* h5trust_gen.c — writes the hostile HDF5 files the h5trust tests open with
 * mp.h5.open (tests/h5trust.cmake), into ./h5trust/ of the test directory:
 *   base_old.h5 / base_new.h5  a small valid run-like file (groups, contiguous,
 *       chunked+deflate, compact and scalar datasets, int32 tokens, numeric,
 *       fixed and variable-length string attributes, a soft link), in HDF5's
 *       earliest file format (no metadata checksums, as h5py writes by default)
 *       and in the 1.8 format mechprobe writes;
 *   hostile_NNN.h5  corruptions of them: bytes overwritten at offsets spread
 *       over the metadata (everything but the raw data), fields after every
 *       B-tree / heap / symbol-node signature, and truncations;
 *   sizes.h5   datasets declaring 1 GiB / 4 GiB whose data was never written;
 *   empty.h5   an empty dataset of shape {2^52, 0};
 *   deep.h5    2000 nested groups with a dataset at the bottom, and one 64 deep;
 *   ints.h5    int64 / uint32 / float64 data outside int32's range, and in it;
 *   manylinks.h5  a group of 2^18 + 1 soft links.
 * It checks only that the files were written; the other tests judge reading. */
#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DIR "h5trust"
#define H(x) do { if ((x) < 0) { fprintf(stderr, "h5trust_gen: %s failed (line %d)\n", #x, __LINE__); exit(1); } } while (0)

static void path_of(char *buf, size_t n, const char *name) { snprintf(buf, n, DIR "/%s", name); }

static void attr_int(hid_t o, const char *k, long long v) {
    hid_t s = H5Screate(H5S_SCALAR), a = H5Acreate2(o, k, H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT);
    H(H5Awrite(a, H5T_NATIVE_LLONG, &v));
    H5Aclose(a);
    H5Sclose(s);
}

static void attr_str(hid_t o, const char *k, const char *v, int vlen) {
    hid_t t = H5Tcopy(H5T_C_S1), s = H5Screate(H5S_SCALAR);
    H(H5Tset_size(t, vlen ? H5T_VARIABLE : strlen(v)));
    hid_t a = H5Acreate2(o, k, t, s, H5P_DEFAULT, H5P_DEFAULT);
    H(vlen ? H5Awrite(a, t, &v) : H5Awrite(a, t, v));
    H5Aclose(a);
    H5Sclose(s);
    H5Tclose(t);
}

static void attr_floats(hid_t o, const char *k, const double *v, hsize_t n) {
    hid_t s = H5Screate_simple(1, &n, NULL), a = H5Acreate2(o, k, H5T_IEEE_F64LE, s, H5P_DEFAULT, H5P_DEFAULT);
    H(H5Awrite(a, H5T_NATIVE_DOUBLE, v));
    H5Aclose(a);
    H5Sclose(s);
}

/* dataset of native type mt stored as ft; layout 0 contiguous, 1 chunked+deflate, 2 compact */
static void dset(hid_t loc, const char *name, hid_t ft, hid_t mt, int nd, const hsize_t *dims, int layout,
                 const void *data) {
    hid_t s = nd ? H5Screate_simple(nd, dims, NULL) : H5Screate(H5S_SCALAR), p = H5Pcreate(H5P_DATASET_CREATE);
    if (layout == 1) {
        hsize_t c[8];
        for (int i = 0; i < nd; i++) c[i] = dims[i];
        c[0] = dims[0] > 4 ? 4 : dims[0];
        H(H5Pset_chunk(p, nd, c));
        H(H5Pset_shuffle(p));
        H(H5Pset_deflate(p, 4));
    } else if (layout == 2) {
        H(H5Pset_layout(p, H5D_COMPACT));
    }
    hid_t lc = H5Pcreate(H5P_LINK_CREATE);
    H(H5Pset_create_intermediate_group(lc, 1));
    hid_t d = H5Dcreate2(loc, name, ft, s, lc, p, H5P_DEFAULT);
    H(d);
    if (data) H(H5Dwrite(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
    H5Dclose(d);
    H5Pclose(lc);
    H5Pclose(p);
    H5Sclose(s);
}

static void write_base(const char *path, int new_format) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (new_format) H(H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST));
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H(f);
    float a[4 * 8], b[16 * 16], c[6];
    int32_t tok[2 * 5];
    for (int i = 0; i < 32; i++) a[i] = (float)i * 0.5f - 3;
    for (int i = 0; i < 256; i++) b[i] = (float)(i % 17) * 0.25f;
    for (int i = 0; i < 6; i++) c[i] = (float)i + 100;
    for (int i = 0; i < 10; i++) tok[i] = 3 * i + 1;
    double loss = 2.5, fv[3] = {0.1, 0.2, 0.3};
    dset(f, "/acts/hook_a", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, (hsize_t[]){4, 8}, 0, a);
    dset(f, "/acts/hook_b", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, (hsize_t[]){16, 16}, 1, b);
    dset(f, "/acts/hook_c", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, (hsize_t[]){6}, 2, c);
    dset(f, "/tokens", H5T_STD_I32LE, H5T_NATIVE_INT32, 2, (hsize_t[]){2, 5}, 0, tok);
    dset(f, "/loss", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 0, NULL, 0, &loss);
    attr_str(f, "format", "mechprobe.run", 0);
    attr_int(f, "version", 1);
    attr_str(f, "note", "a variable-length string", 1);
    attr_str(f, "source", "model.h5", 1);
    attr_floats(f, "scales", fv, 3);
    hid_t g = H5Gcreate2(f, "/meta", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    attr_int(g, "n_layer", 2);
    attr_str(g, "model", "tiny", 0);
    attr_str(g, "norm", "rms", 1);
    H5Gclose(g);
    g = H5Gcreate2(f, "/empty", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Gclose(g);
    H(H5Lcreate_soft("/acts/hook_a", f, "/link_a", H5P_DEFAULT, H5P_DEFAULT));
    H5Fclose(f);
    H5Pclose(fapl);
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *fp = fopen(path, "rb");
    if (!fp) exit(1);
    fseek(fp, 0, SEEK_END);
    *n = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *b = malloc(*n);
    if (!b || fread(b, 1, *n, fp) != *n) exit(1);
    fclose(fp);
    return b;
}

static void mark(unsigned char *raw, size_t n, haddr_t off, hsize_t len) {
    if (off == HADDR_UNDEF) return;
    for (hsize_t i = 0; i < len && off + i < n; i++) raw[off + i] = 1;
}

/* raw[i] = 1 where byte i is a dataset's raw data (contiguous or chunks) */
static void raw_map(const char *path, unsigned char *raw, size_t n) {
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    const char *names[] = {"/acts/hook_a", "/acts/hook_b", "/tokens", "/loss"};
    for (int k = 0; k < 4; k++) {
        hid_t d = H5Dopen2(f, names[k], H5P_DEFAULT);
        hid_t p = H5Dget_create_plist(d);
        if (H5Pget_layout(p) == H5D_CHUNKED) {
            hid_t s = H5Dget_space(d);
            hsize_t nc = 0;
            H5Dget_num_chunks(d, s, &nc);
            for (hsize_t i = 0; i < nc; i++) {
                hsize_t off[8], size = 0;
                unsigned fm;
                haddr_t addr;
                if (H5Dget_chunk_info(d, s, i, off, &fm, &addr, &size) >= 0) mark(raw, n, addr, size);
            }
            H5Sclose(s);
        } else if (H5Pget_layout(p) == H5D_CONTIGUOUS) {
            mark(raw, n, H5Dget_offset(d), H5Dget_storage_size(d));
        }
        H5Pclose(p);
        H5Dclose(d);
    }
    H5Fclose(f);
}

static int n_out;

static void emit(const unsigned char *b, size_t n) {
    char p[256], name[64];
    snprintf(name, sizeof name, "hostile_%03d.h5", n_out++);
    path_of(p, sizeof p, name);
    FILE *fp = fopen(p, "wb");
    if (!fp || fwrite(b, 1, n, fp) != n) exit(1);
    fclose(fp);
}

/* writes a copy of b with len bytes at off set by pattern k (k >= 6: the
 * 8-byte little-endian address `addr`, a pointer into other metadata or a
 * structure's own address: loops and out-of-place parses) */
static void corrupt_at(const unsigned char *b, size_t n, size_t off, int k, uint64_t addr) {
    unsigned char *c = malloc(n);
    memcpy(c, b, n);
    static const unsigned char pats[6][8] = {
        {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, {0, 0, 0, 0, 0, 0, 0, 0},
        {0, 0, 0, 0, 0, 0, 0, 0} /* bit flip */, {0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0},
        {0x01, 0, 0, 0, 0, 0, 0, 0} /* +1 */, {0xff, 0xff, 0, 0, 0, 0, 0, 0}};
    size_t len = k == 2 || k == 4 ? 1 : k == 3 ? 4 : k == 5 ? 2 : 8;
    for (size_t i = 0; i < len && off + i < n; i++) {
        if (k == 2) c[off + i] ^= 0xff;
        else if (k == 4) c[off + i] += 1;
        else if (k >= 6) c[off + i] = (unsigned char)(addr >> (8 * i));
        else c[off + i] = pats[k][i];
    }
    emit(c, n);
    free(c);
}

static void corrupt(const unsigned char *b, size_t n, size_t off, int k) { corrupt_at(b, n, off, k, 0); }

/* object header addresses of the base file's objects */
static int header_addrs(const char *path, uint64_t *out, int max) {
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    const char *names[] = {"/", "/acts", "/acts/hook_a", "/acts/hook_b", "/acts/hook_c", "/tokens", "/loss", "/meta", "/empty"};
    int n = 0;
    for (int k = 0; k < 9 && n < max; k++) {
        H5O_info_t oi;
        if (H5Oget_info_by_name2(f, names[k], &oi, H5O_INFO_BASIC, H5P_DEFAULT) >= 0) out[n++] = (uint64_t)oi.addr;
    }
    H5Fclose(f);
    return n;
}

static void hostile_set(const char *base, int sweep, int structural) {
    size_t n;
    unsigned char *b = slurp(base, &n);
    unsigned char *raw = calloc(n, 1);
    raw_map(base, raw, n);
    size_t *meta = malloc(n * sizeof *meta), nm = 0;
    for (size_t i = 0; i < n; i++)
        if (!raw[i]) meta[nm++] = i;
    uint64_t hdr[16];
    int nh = header_addrs(base, hdr, 16);
    /* a sweep over the metadata bytes, patterns in turn (6, 7: an object header's address) */
    for (int s = 0; s < sweep; s++) {
        size_t off = meta[(size_t)s * nm / (size_t)sweep + 3 * (size_t)s % 7];
        int k = s % 8;
        corrupt_at(b, n, k >= 6 ? off & ~(size_t)7 : off, k, hdr[s % nh]);
    }
    if (structural) {
        /* B-tree nodes, symbol nodes, local heaps: counts set to all ones, and
         * their address fields pointing back at the structure itself */
        static const char *sigs[] = {"TREE", "SNOD", "HEAP"};
        int seen[3] = {0, 0, 0};
        for (size_t i = 0; i + 40 < n; i++)
            for (int k = 0; k < 3; k++) {
                if (memcmp(b + i, sigs[k], 4) || seen[k]++ >= 3) continue; /* the first three of each */
                corrupt(b, n, i + 6, 5);                   /* entries used / symbols */
                corrupt_at(b, n, i + 8, 6, i);              /* sibling / free list / ... -> itself */
                corrupt_at(b, n, i + (k == 0 ? 32 : 24), 6, i); /* a child / the data address -> itself */
                if (k == 0) corrupt(b, n, i + 5, 4);       /* the level */
            }
        /* global heap collections (variable-length strings): each object's
         * size set past the collection (32767, all ones, 0), its index, the
         * free-space object's size and the collection's own size */
        for (size_t i = 0; i + 32 < n; i++) {
            if (memcmp(b + i, "GCOL", 4)) continue;
            uint64_t csize = 0;
            memcpy(&csize, b + i + 8, 8);
            corrupt_at(b, n, i + 8, 6, 0x7fff);
            corrupt_at(b, n, i + 8, 6, 16);
            size_t o = i + 16;
            for (int obj = 0; obj < 8 && o + 16 <= n && o + 16 <= i + csize; obj++) {
                uint16_t idx;
                uint64_t osz;
                memcpy(&idx, b + o, 2);
                memcpy(&osz, b + o + 8, 8);
                corrupt_at(b, n, o + 8, 6, 0x7fff);
                corrupt(b, n, o + 8, 0);
                if (idx == 0) { corrupt_at(b, n, o + 8, 6, 8); break; } /* the free space */
                corrupt(b, n, o, 5);
                corrupt_at(b, n, o + 8, 6, 0);
                o += 16 + ((osz + 7) & ~(uint64_t)7);
            }
        }
        /* object headers (version 1: no signature): message count, size, and
         * message bodies pointing at the header itself */
        for (int h = 0; h < nh; h++) {
            size_t a = (size_t)hdr[h];
            if (a + 64 >= n) continue;
            if (h % 3 == 0) corrupt(b, n, a + 2, 5);
            else if (h % 3 == 1) corrupt(b, n, a + 8, 3);
            else corrupt_at(b, n, a + 24 + 8 * (size_t)(h % 4), 6, a);
        }
    }
    /* truncations */
    size_t cuts[] = {n / 2, n / 4, 2048 < n ? 2048 : n / 3, 600};
    for (int k = 0; k < 4; k++) emit(b, cuts[k]);
    free(meta);
    free(raw);
    free(b);
}

int main(void) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    mkdir(DIR, 0777);
    for (int i = 0; i < 1000; i++) { /* the set of an earlier run */
        char old[64];
        snprintf(old, sizeof old, DIR "/hostile_%03d.h5", i);
        remove(old);
    }
    char p[256], q[256];
    path_of(p, sizeof p, "base_old.h5");
    write_base(p, 0);
    path_of(q, sizeof q, "base_new.h5");
    write_base(q, 1);
    hostile_set(p, 12, 1);
    hostile_set(q, 8, 0);

    /* declared sizes the file does not hold */
    path_of(p, sizeof p, "sizes.h5");
    hid_t f = H5Fcreate(p, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    dset(f, "/big", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, (hsize_t[]){(hsize_t)1 << 28}, 0, NULL);
    dset(f, "/bigint", H5T_STD_I32LE, H5T_NATIVE_INT32, 2, (hsize_t[]){(hsize_t)1 << 20, 1 << 10}, 0, NULL);
    {
        hid_t s = H5Screate_simple(1, (hsize_t[]){(hsize_t)1 << 30}, NULL), pl = H5Pcreate(H5P_DATASET_CREATE);
        H(H5Pset_chunk(pl, 1, (hsize_t[]){1 << 16}));
        H(H5Pset_deflate(pl, 6));
        hid_t d = H5Dcreate2(f, "/bigchunk", H5T_IEEE_F32LE, s, H5P_DEFAULT, pl, H5P_DEFAULT);
        H(d);
        float *one = calloc(1 << 16, sizeof *one);
        hid_t ms = H5Screate_simple(1, (hsize_t[]){1 << 16}, NULL);
        H(H5Sselect_hyperslab(s, H5S_SELECT_SET, (hsize_t[]){0}, NULL, (hsize_t[]){1 << 16}, NULL));
        H(H5Dwrite(d, H5T_NATIVE_FLOAT, ms, s, H5P_DEFAULT, one));
        free(one);
        H5Sclose(ms);
        H5Dclose(d);
        H5Pclose(pl);
        H5Sclose(s);
    }
    float small[3] = {1, 2, 3};
    dset(f, "/small", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, (hsize_t[]){3}, 0, small);
    H5Fclose(f);

    /* an empty dataset with a huge extent */
    path_of(p, sizeof p, "empty.h5");
    f = H5Fcreate(p, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    dset(f, "/e", H5T_STD_I32LE, H5T_NATIVE_INT32, 2, (hsize_t[]){(hsize_t)1 << 52, 0}, 0, NULL);
    dset(f, "/ok", H5T_STD_I32LE, H5T_NATIVE_INT32, 2, (hsize_t[]){3, 0}, 0, NULL);
    H5Fclose(f);

    /* deep nesting */
    path_of(p, sizeof p, "deep.h5");
    f = H5Fcreate(p, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t g = f;
    for (int i = 0; i < 2000; i++) {
        hid_t h = H5Gcreate2(g, "g", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        H(h);
        if (g != f) H5Gclose(g);
        g = h;
    }
    dset(g, "x", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, (hsize_t[]){3}, 0, small);
    H5Gclose(g);
    H5Fclose(f);
    path_of(p, sizeof p, "deep64.h5"); /* 63 groups and a dataset: a path of 64 components */
    f = H5Fcreate(p, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    g = f;
    for (int i = 0; i < 63; i++) {
        hid_t h = H5Gcreate2(g, "g", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (g != f) H5Gclose(g);
        g = h;
    }
    dset(g, "x", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, (hsize_t[]){3}, 0, small);
    H5Gclose(g);
    H5Fclose(f);

    /* integers outside int32 */
    path_of(p, sizeof p, "ints.h5");
    f = H5Fcreate(p, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    long long i64[3] = {1, 3000000000LL, -5}, i64ok[3] = {1, 2147483647LL, -2147483648LL};
    unsigned u32[2] = {1, 4000000000u};
    double f64[2] = {1, 1e10};
    dset(f, "/i64", H5T_STD_I64LE, H5T_NATIVE_LLONG, 1, (hsize_t[]){3}, 0, i64);
    dset(f, "/i64neg", H5T_STD_I64BE, H5T_NATIVE_LLONG, 1, (hsize_t[]){3}, 0, (long long[]){0, 7, -3000000000LL});
    dset(f, "/i64ok", H5T_STD_I64LE, H5T_NATIVE_LLONG, 1, (hsize_t[]){3}, 1, i64ok);
    dset(f, "/u32", H5T_STD_U32LE, H5T_NATIVE_UINT, 1, (hsize_t[]){2}, 0, u32);
    dset(f, "/f64", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1, (hsize_t[]){2}, 0, f64);
    H5Fclose(f);

    /* a group of 2^18 + 1 soft links (listing is bounded at 2^18) */
    path_of(p, sizeof p, "manylinks.h5");
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H(H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST));
    f = H5Fcreate(p, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    g = H5Gcreate2(f, "/many", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    for (int i = 0; i < (1 << 18) + 1; i++) {
        char ln[32];
        snprintf(ln, sizeof ln, "l%d", i);
        H(H5Lcreate_soft("/nowhere", g, ln, H5P_DEFAULT, H5P_DEFAULT));
    }
    H5Gclose(g);
    H5Fclose(f);
    H5Pclose(fapl);

    printf("h5trust_gen: %d hostile files and the size, depth, int and link cases in ./" DIR "\n", n_out);
    return n_out >= 30 ? 0 : 1;
}
