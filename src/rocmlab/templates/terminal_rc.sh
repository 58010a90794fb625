# Read by the shell of a JupyterLab terminal of the rocmlab hub (rocmlab.hub.terminal): bash as its
# --rcfile, a POSIX sh as $ENV. It puts the course's tools (rocmlab, nbgrader) first on PATH, after
# the login profiles have set PATH anew.
if [ -n "${BASH_VERSION-}" ]; then
    # bash started with --rcfile is not a login shell: read what a login shell reads, as bash does
    [ -r /etc/profile ] && . /etc/profile
    for _rocmlab_profile in "$HOME/.bash_profile" "$HOME/.bash_login" "$HOME/.profile"; do
        if [ -r "$_rocmlab_profile" ]; then
            . "$_rocmlab_profile"
            break
        fi
    done
    unset _rocmlab_profile
fi
if [ -n "${ROCMLAB_TOOLS_BIN-}" ]; then
    case "$PATH" in
        "$ROCMLAB_TOOLS_BIN":*) ;;
        *) PATH="$ROCMLAB_TOOLS_BIN:$PATH" ;;
    esac
    export PATH
fi
