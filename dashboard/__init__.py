"""Dashboard: the Streamlit app site owners browse; it reads only the small agg.* Delta tables."""
