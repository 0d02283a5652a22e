"""The workbench pages, one script per page, run by st.navigation in app/main.py.

Not named `pages/`: Streamlit would also treat such a folder as a legacy multipage app and
answer direct URLs with "page not found" before st.navigation runs.
"""
