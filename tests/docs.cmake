# tests/docs.cmake — the README and the manual in docs/: every relative link and
# image path (and #anchor) resolves, and the README links every docs/ page (<1 s).
# Their Lua examples run in test_readme_examples (lua.cmake) and test_api_doc.
mp_lua_test(test_docs_links "unit;lua" docs_links.lua)
