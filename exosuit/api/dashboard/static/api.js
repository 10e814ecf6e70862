// The API, from the same origin as the page: every request asks for the microversion
// the dashboard is written against and, once signed in with Keystone, carries the
// token. Errors become ApiError with the API's own message (Cyborg's envelope).

export const VERSION = "2.11";

const ROOT = new URL(
  document.querySelector('meta[name="exosuit-root"]').content,
  location.href,
);
const SESSION_KEY = "exosuit.dashboard.session";

export class ApiError extends Error {
  constructor(status, message, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// The Keystone session of this tab (sessionStorage: gone when the tab closes).
// {token, user, project, roles, expires_at}; null under noauth or signed out.
export const session = {
  get() {
    try {
      return JSON.parse(sessionStorage.getItem(SESSION_KEY));
    } catch {
      return null;
    }
  },
  set(value) {
    sessionStorage.setItem(SESSION_KEY, JSON.stringify(value));
  },
  clear() {
    sessionStorage.removeItem(SESSION_KEY);
  },
};

function errorOf(status, data, text) {
  let message = text || `HTTP ${status}`;
  let code = null;
  if (data && typeof data.error_message === "string") {
    try {
      const fault = JSON.parse(data.error_message);
      message = fault.faultstring;
      code = fault.code || null;
    } catch {
      message = data.error_message;
    }
  } else if (data && data.error && data.error.message) {
    message = data.error.message; // keystonemiddleware's 401
  }
  return new ApiError(status, message, code);
}

// Every request asks for VERSION, the latest microversion (the console shows
// everything the API has).
export async function request(method, path, body) {
  const headers = {
    Accept: "application/json",
    "OpenStack-API-Version": `accelerator ${VERSION}`,
  };
  const current = session.get();
  if (current && current.token) headers["X-Auth-Token"] = current.token;
  const init = { method, headers, cache: "no-store" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(new URL(path, ROOT), init);
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) throw errorOf(response.status, data, text);
  return data;
}

export const get = (path) => request("GET", path);
export const post = (path, body) => request("POST", path, body);

// A URL path with query parameters (undefined and null ones left out).
export function withQuery(path, query = {}) {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query)) {
    if (value !== undefined && value !== null && value !== "") params.set(key, value);
  }
  const text = params.toString();
  return text ? `${path}?${text}` : path;
}

// One page of a list: {items, more}; ``more`` says the API has a next page.
export async function list(path, key, query = {}) {
  const data = await get(withQuery(path, query));
  return { items: data[key], more: Boolean(data.next) };
}

// Every item of a list, page after page (up to ``max`` items).
export async function listAll(path, key, query = {}, max = 5000) {
  const items = [];
  let url = withQuery(path, { limit: 1000, ...query });
  while (url && items.length < max) {
    const data = await get(url);
    items.push(...data[key]);
    // ``next`` is absolute and may name the public endpoint: keep its query only.
    url = data.next ? path + new URL(data.next).search : null;
  }
  return items;
}
