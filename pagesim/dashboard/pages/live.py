import streamlit as st

if __name__ == "__main__":
    st.title("live")
