/* test_h5filter.c — a dataset compressed with an HDF5 filter this libhdf5 does
 * not have (h5py's LZF, id 32000) must be reported as that filter, naming the
 * file and the dataset, instead of the plugin loader's "can't open directory"
 * (issue 17). The file is written here with a pass-through filter registered
 * under LZF's id, which is then unregistered before the read. */
#include "h5io.h"
#include "testutil.h"

#include <hdf5.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static size_t passthrough(unsigned flags, size_t cd_nelmts, const unsigned cd_values[], size_t nbytes,
                          size_t *buf_size, void **buf) {
    (void)flags; (void)cd_nelmts; (void)cd_values; (void)buf_size; (void)buf;
    return nbytes;
}

static const H5Z_class2_t fake_lzf = {H5Z_CLASS_T_VERS, (H5Z_filter_t)32000, 1, 1, "lzf", NULL, NULL, passthrough};

int main(void) {
    char path[] = "/tmp/mp_h5filter_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    CHECK(H5Zregister(&fake_lzf) >= 0, "register the stand-in filter");
    float data[64], back[64];
    for (int i = 0; i < 64; i++) data[i] = (float)i * 0.5f;
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims[1] = {64}, chunk[1] = {16};
    hid_t sp = H5Screate_simple(1, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, chunk);
    H5Pset_filter(dcpl, 32000, H5Z_FLAG_OPTIONAL, 0, NULL); /* as h5py sets LZF */
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t ds = H5Dcreate2(f, "acts/x", H5T_NATIVE_FLOAT, sp, lcpl, dcpl, H5P_DEFAULT);
    H5Pclose(lcpl);
    CHECK(ds >= 0 && H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0, "write");
    H5Dclose(ds); H5Pclose(dcpl); H5Sclose(sp); H5Fclose(f);

    /* with the filter registered the file reads back */
    hid_t h;
    CHECK(mp_h5_open(&h, path, MP_H5_READ) == MP_OK, "open: %s", mp_last_error());
    CHECK(mp_h5_read_f32_into(h, "acts/x", back, 64) == MP_OK, "read with the filter: %s", mp_last_error());
    CHECK(memcmp(back, data, sizeof data) == 0, "values read back");
    mp_h5_close(&h);

    /* without it: a clear error naming the filter, the dataset and the file */
    CHECK(H5Zunregister(32000) >= 0, "unregister");
    CHECK(mp_h5_open(&h, path, MP_H5_READ) == MP_OK, "open: %s", mp_last_error());
    mp_status st = mp_h5_read_f32_into(h, "acts/x", back, 64);
    const char *msg = mp_last_error();
    printf("read without the filter: %s\n", msg);
    CHECK(st != MP_OK, "the read must fail");
    CHECK(strstr(msg, "HDF5 filter LZF (id 32000) is not available") != NULL, "names the filter: %s", msg);
    CHECK(strstr(msg, "acts/x") != NULL && strstr(msg, path) != NULL, "names the dataset and the file: %s", msg);
    CHECK(strstr(msg, "can't open directory") == NULL, "no plugin-loader message: %s", msg);
    float *all = NULL;
    mp_h5_dsinfo info;
    CHECK(mp_h5_read_f32(h, "acts/x", &all, &info) != MP_OK && strstr(mp_last_error(), "LZF"), "read_f32 too: %s",
          mp_last_error());
    free(all);
    mp_h5_close(&h);
    unlink(path);
    return tu_finish("test_h5filter");
}
