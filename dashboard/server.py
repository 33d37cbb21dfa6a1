"""The dashboard process: Streamlit's page (``dashboard/app.py``) inside a Starlette app with the
login and logout routes (``dashboard/routes.py``).

``tally up`` runs ``python -m streamlit run dashboard/server.py``: Streamlit finds ``app`` (an
``st.App``) and serves it with uvicorn, with the same ``--server.*`` options as a plain page.
"""

from __future__ import annotations

from pathlib import Path

from streamlit.starlette import App

from dashboard.routes import LoginRoutes

app = App(Path(__file__).with_name("app.py"), routes=LoginRoutes().routes())
