# view.cmake — `mechprobe view` (webview/, docs/VIEW.md): interactive HTML pages
# checked in headless Chromium (tests/viewtest/view_test.py): a capture of the
# aidreams260K model (attention weights of a chosen query and every head's sink
# share against the run file read by h5dump, each activation series per token,
# the Q/K PCA against an independent eigensolver), the report page of each
# shipped probe's quick run (tests/data/rejudge/*) and of the committed
# results/*/ folders, and bad inputs (clear messages, no page left). The
# browser tests skip (77) where no chromium is installed; ./setup.sh test
# installs it. One browser per test (DevTools protocol over a pipe); a page
# takes about a second.
foreach(_mode run reports errors)
  add_test(NAME view_${_mode}
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/viewtest/view_test.py ${_mode} $<TARGET_FILE:mechprobe>
                   ${CMAKE_SOURCE_DIR} ${MP_SHARED_DIR} ${CMAKE_CURRENT_BINARY_DIR}/view_${_mode})
  # the guarded check of each .h5 read (h5guard.h) gets 60 s, not 5 s + 1 s per 16 MiB: on a
  # loaded machine the committed results' files (up to 11 MB, read in full) can take longer
  set_tests_properties(view_${_mode} PROPERTIES LABELS "lua" SKIP_RETURN_CODE 77 TIMEOUT 240
                       WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR} ENVIRONMENT "MECHPROBE_LOAD_TIMEOUT=60")
endforeach()
