/*
 * A stand-in for OME's Rust library libxet (pkg/xet, header pkg/xet/xet.h), written for this
 * project's end-to-end tests: e2e/build-binaries.sh compiles it and archives it as
 * pkg/xet/target/release/libxet.a so that OME's controller-manager links. The manager never
 * calls these functions (only OME's model agent downloads models); each one that could do work
 * returns NULL or an error saying the library is a stub.
 */
#include <stdlib.h>
#include <string.h>

#include "xet.h"

static XetError *stub_error(void) {
    XetError *err = calloc(1, sizeof *err);
    if (err == NULL) {
        return NULL;
    }
    err->code = -1;
    err->message = strdup("libxet is a stub in ome-scheduler's e2e build: downloads are not available");
    err->details = NULL;
    return err;
}

void xet_version_1_0_0(void) {}

XetClient *xet_client_new(const XetConfig *config) {
    (void)config;
    return NULL;
}

void xet_client_free(XetClient *client) { (void)client; }

XetError *xet_client_set_progress_callback(XetClient *client, XetProgressCallback callback, void *user_data,
                                           uint32_t throttle_ms) {
    (void)client, (void)callback, (void)user_data, (void)throttle_ms;
    return stub_error();
}

XetError *xet_list_files(XetClient *client, const char *repo_id, const char *revision, XetFileList **out_files) {
    (void)client, (void)repo_id, (void)revision;
    if (out_files != NULL) {
        *out_files = NULL;
    }
    return stub_error();
}

XetError *xet_download_file(XetClient *client, const XetDownloadRequest *request,
                            const XetCancellationToken *cancel_token, char **out_path) {
    (void)client, (void)request, (void)cancel_token;
    if (out_path != NULL) {
        *out_path = NULL;
    }
    return stub_error();
}

XetError *xet_download_snapshot(XetClient *client, const char *repo_id, const char *repo_type, const char *revision,
                                const char *local_dir, const XetCancellationToken *cancel_token, char **out_path) {
    (void)client, (void)repo_id, (void)repo_type, (void)revision, (void)local_dir, (void)cancel_token;
    if (out_path != NULL) {
        *out_path = NULL;
    }
    return stub_error();
}

void xet_free_error(XetError *err) {
    if (err == NULL) {
        return;
    }
    free(err->message);
    free(err->details);
    free(err);
}

void xet_free_file_list(XetFileList *list) {
    if (list == NULL) {
        return;
    }
    for (size_t i = 0; i < list->count; i++) {
        free(list->files[i].path);
        free(list->files[i].hash);
    }
    free(list->files);
    free(list);
}

void xet_free_string(char *str) { free(str); }
